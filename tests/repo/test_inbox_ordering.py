"""Two deliveries storing the same statuses in opposite orders, at once, on real PostgreSQL.

Each insert holds its unique-index entry until commit. Were the statuses inserted in the
order given, delivery 1 would hold A and wait for B while delivery 2 holds B and waits for
A: PostgreSQL would abort one with a deadlock. The interleaving is forced: delivery 1
stops right after inserting its first status until delivery 2 is seen waiting on a lock.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

from sqlalchemy import event, func, select, text

from app.db import Database
from app.models import WebhookDelivery, WebhookStatus
from app.repo.inbox import IncomingStatus, store_delivery, store_statuses

from ..conftest import T0
from ..factories import make_world


def incoming(identity_id: int, wamid: str) -> IncomingStatus:
    return IncomingStatus(
        identity_id=identity_id,
        provider="whatsapp",
        provider_message_id=wamid,
        status="delivered",
        provider_time=T0 + timedelta(seconds=3),
    )


def waits_on_a_lock(database: Database, pid: int) -> bool:
    with database.engine.connect() as connection:
        wait = connection.execute(
            text("SELECT wait_event_type FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid}
        ).scalar()
    return wait == "Lock"


def test_two_deliveries_with_the_same_statuses_in_opposite_orders_both_commit(
    committed_db: Database,
) -> None:
    world = make_world(committed_db)
    a = incoming(world.identity_id, "wamid.A")
    b = incoming(world.identity_id, "wamid.B")
    first_holds_one = threading.Event()
    second_pid: list[int] = []
    errors: list[BaseException] = []
    results: dict[str, tuple[list[int], int]] = {}
    paused = threading.local()

    def pause_after_first_insert(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if threading.current_thread().name != "first" or getattr(paused, "done", False):
            return
        if not statement.startswith("INSERT INTO webhook_statuses"):
            return
        paused.done = True
        first_holds_one.set()
        # Polls a condition (never a duration): go on once delivery 2 is blocked on a lock.
        deadline = time.monotonic() + 60
        while not (second_pid and waits_on_a_lock(committed_db, second_pid[0])):
            assert time.monotonic() < deadline, "delivery 2 never waited on delivery 1"
            time.sleep(0.02)

    def deliver(name: str, statuses: list[IncomingStatus]) -> None:
        try:
            if name == "second":
                assert first_holds_one.wait(timeout=60)
            with committed_db.transaction() as session:
                if name == "second":
                    second_pid.append(session.scalar(text("SELECT pg_backend_pid()")))
                delivery = store_delivery(session, "whatsapp", world.identity_id, {}, "{}", T0)
                results[name] = store_statuses(session, delivery, statuses, T0)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    event.listen(committed_db.engine, "after_cursor_execute", pause_after_first_insert)
    try:
        threads = [
            threading.Thread(target=deliver, args=("first", [a, b]), name="first"),
            threading.Thread(target=deliver, args=("second", [b, a]), name="second"),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    finally:
        event.remove(committed_db.engine, "after_cursor_execute", pause_after_first_insert)

    assert errors == []
    assert len(results["first"][0]) == 2 and results["first"][1] == 0
    assert results["second"] == ([], 2)  # both already stored: duplicates, nothing new
    with committed_db.transaction() as session:
        assert session.scalar(select(func.count()).select_from(WebhookDelivery)) == 2
        assert session.scalar(select(func.count()).select_from(WebhookStatus)) == 2


def test_the_ids_come_back_in_the_order_the_statuses_were_given(db: Database) -> None:
    world = make_world(db)
    given = [incoming(world.identity_id, wamid) for wamid in ("wamid.Z", "wamid.A", "wamid.M")]
    with db.transaction() as session:
        delivery = store_delivery(session, "whatsapp", world.identity_id, {}, "{}", T0)
        ids, duplicates = store_statuses(session, delivery, given, T0)
        wamids = [
            session.scalars(
                select(WebhookStatus.provider_message_id).where(WebhookStatus.id == status_id)
            ).one()
            for status_id in ids
        ]
    assert duplicates == 0
    assert wamids == ["wamid.Z", "wamid.A", "wamid.M"]
