"""A retention batch is a handful of statements whatever its size: rows that get the same
values share one UPDATE (app/repo/retention.py `_update_grouped`)."""

from __future__ import annotations

from datetime import timedelta

from app.db import Database
from app.repo.retention import Cutoff, purge_messages

from ..conftest import T0
from ..factories import make_world
from ..sql_verbs import executions
from ..views.dashboard_world import failed_message

ERROR = {
    "provider": "whatsapp",
    "http_status": 400,
    "code": 132001,
    "title": "Template name does not exist",
    "message": "(#132001) Template name does not exist in the translation for +15551234567",
    "raw": '{"error":{"message":"(#132001) Template name does not exist"}}',
}


def test_a_batch_costs_the_same_few_statements_for_five_rows_or_forty(db: Database) -> None:
    world = make_world(db)
    cutoff = Cutoff(world.tenant_id, T0 + timedelta(days=1))
    counts = []
    for size in (5, 40):
        for minute in range(size):
            failed_message(db, world, error=ERROR, minute=minute)
        with executions(db) as ran, db.transaction() as session:
            assert purge_messages(session, cutoff, T0 + timedelta(days=2), 100) == size
        counts.append(len(ran))
    assert counts[0] == counts[1] <= 10, ran
