"""What the retention tests purge: a provider's template error with its raw body (`ERROR`),
a moment past the 30 days a tenant's content is kept by default (`LATER`), and a purge
pass given all the time it needs (`purge_all_due`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from app.db import Database
from jobs.retention import Purged, purge_content

from ..conftest import T0

RAW = '{"error":{"message":"(#132001) Template name does not exist in the translation"}}'
ERROR = {
    "provider": "whatsapp",
    "http_status": 400,
    "code": 132001,
    "title": "Template name does not exist",
    "message": "(#132001) Template name does not exist in the translation for +15551234567",
    "raw": RAW,
}
LATER = T0 + timedelta(days=31)


def purge_all_due(db: Database, now: datetime, **options: Any) -> Purged:
    """A purge pass on a clock that never moves, so its share of a sweep pass never runs
    out: what is due is purged however loaded the machine (the share is the subject of
    tests that give their own timer)."""
    return purge_content(db, now, timer=lambda: 0.0, **options)
