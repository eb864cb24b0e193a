"""Whether the database answers."""

from __future__ import annotations

import logging

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from app.db import Database

log = logging.getLogger(__name__)


def database_is_reachable(db: Database) -> bool:
    try:
        with db.engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        log.warning("database unreachable: %s", exc.__class__.__name__)
        return False
    return True
