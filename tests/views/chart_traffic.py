"""An hour of one identity's traffic for the chart tests (`an_hour_of_traffic`), by the minute
after T0 (`at`).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import update

from app.db import Database
from app.models import Message

from ..conftest import T0
from ..factories import World, make_message
from .dashboard_world import failed_message, sent_message


def at(minute: int) -> datetime:
    return T0 + timedelta(minutes=minute)


def an_hour_of_traffic(database: Database, world: World) -> None:
    """12:02 three sends (two delivered at 12:03, one of them read at 12:04), 12:05 one,
    12:06 one failure, and two messages queued at 12:01 and 12:08 that no worker took."""
    sends = [sent_message(database, world, f"wamid.{n}", minute=2) for n in range(3)]
    sent_message(database, world, "wamid.late", minute=5)
    with database.transaction() as session:
        session.execute(update(Message).where(Message.id.in_(sends[:2])).values(delivered_at=at(3)))
        session.execute(update(Message).where(Message.id == sends[0]).values(read_at=at(4)))
    failed_message(database, world, minute=6)
    make_message(database, world, now=at(1))
    make_message(database, world, now=at(8))
