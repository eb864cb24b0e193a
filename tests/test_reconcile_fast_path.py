"""The reconciler's PostgreSQL fast path (`app/repo/webhook_sql.py`): a single status of a
known number is recorded with its raw delivery in one statement, and, when its provider id
names a message, applied in one more. It must decide and write exactly what the step-by-step
path does, fall back to that path when it does not apply, and hold under races."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from app import migrate
from app.correlation import derive_key
from app.db import Database
from app.lifecycle import Source, Status
from app.models import Message, MessageEvent, WebhookDelivery, WebhookStatus
from app.reconcile import apply_recorded
from app.repo.status_apply import apply_webhook_status
from app.repo.transitions import apply_status

from .conftest import SECRET_KEY, at
from .factories import World, make_world
from .sql_verbs import statements
from .whatsapp_world import claimed, incoming, record, sent_message


@pytest.fixture
def world(db: Database) -> World:
    return make_world(db)


def webhook_move(database: Database, message_id: int, target: Status, seconds: int) -> None:
    """Bring a message to a state the way a provider's status does."""
    with database.transaction() as session:
        assert apply_status(
            session, message_id, target, Source.WEBHOOK, at(seconds), provider_time=at(seconds)
        ).applied


MESSAGE_COLUMNS = (
    "status",
    "cycle",
    "sent_at",
    "delivered_at",
    "read_at",
    "failed_at",
    "failure_class",
    "last_error",
    "dead_letter_rank",
    "pending_verdict",
)
EVENT_COLUMNS = (
    "cycle",
    "source",
    "kind",
    "from_status",
    "to_status",
    "applied",
    "refusal",
    "provider_time",
    "received_at",
    "actor",
    "detail",
)


def outcome(database: Database, message_id: int, status_id: int) -> dict[str, Any]:
    """Everything a status can write: the message, its webhook events, the status row."""
    with database.transaction() as session:
        message = session.get(Message, message_id, populate_existing=True)
        assert message is not None
        events = session.scalars(
            select(MessageEvent)
            .where(MessageEvent.message_id == message_id, MessageEvent.source == "webhook")
            .order_by(MessageEvent.id)
        ).all()
        row = session.get(WebhookStatus, status_id, populate_existing=True)
        assert row is not None
        written = []
        for e in events:
            values = {name: getattr(e, name) for name in EVENT_COLUMNS}
            # Each path has a message of its own: its id and provider id are told apart.
            values["detail"] = {
                key: value
                for key, value in (values["detail"] or {}).items()
                if key != "provider_message_id"
            }
            written.append(values)
        return {
            "message": {name: getattr(message, name) for name in MESSAGE_COLUMNS},
            "events": written,
            "status": (row.result, row.applied_at, row.message_id == message_id, row.tries),
        }


STARTS = {
    "sent": [],
    "delivered": [Status.DELIVERED],
    "read": [Status.DELIVERED, Status.READ],
    "failed": [Status.FAILED],
}


@pytest.mark.parametrize("word", ["sent", "delivered", "read", "failed", "undelivered"])
@pytest.mark.parametrize("start", list(STARTS))
def test_the_one_statement_apply_writes_what_the_step_by_step_path_writes(
    db: Database, start: str, word: str
) -> None:
    world = make_world(db)
    results = {}
    for path in ("fast", "steps"):
        wamid = f"wamid.{path}.{start}.{word}"
        message_id = sent_message(db, world, wamid)
        for n, target in enumerate(STARTS[start]):
            webhook_move(db, message_id, target, 10 + n)
        errors = ({"code": 131026, "title": "Message undeliverable"},)
        status = incoming(
            world,
            wamid,
            word,
            20,
            errors=errors if word in ("failed", "undelivered") else (),
            failure_class="permanent" if word in ("failed", "undelivered") else None,
        )
        recorded = record(db, status)
        (stored,) = recorded.to_apply
        with statements(db) as verbs:
            if path == "fast":
                counts = apply_recorded(db, recorded, at(30))
                (result,) = [name for name, n in counts.items() if n]
            else:  # the sweeper's replay goes step by step
                with db.transaction() as session:
                    result = apply_webhook_status(session, stored.id, at(30))
        if path == "fast":
            assert verbs == ["WITH"]  # match, event, move and claim-and-finish: one statement
        else:
            assert "WITH" not in verbs
        results[path] = (result, outcome(db, message_id, stored.id))
    assert results["fast"] == results["steps"]
    result, written = results["fast"]
    # And what they agree on is the state machine's answer, in the message's own cycle.
    assert written["events"][-1]["from_status"] == start
    assert result == ("applied" if written["events"][-1]["applied"] else "refused")


def test_a_status_no_message_has_the_provider_id_of_falls_back_to_the_steps(
    db: Database, world: World
) -> None:
    # The send's answer has not recorded the provider id yet; our correlation id matches.
    message_id = claimed(db, world).message_id
    with db.transaction() as session:
        correlation = session.get(Message, message_id).correlation_id  # type: ignore[union-attr]
    recorded = record(
        db, incoming(world, "wamid.LATE-ANSWER", "delivered", 20, correlation_id=correlation)
    )
    with statements(db) as verbs:
        counts = apply_recorded(db, recorded, at(30))
    assert counts == {"duplicate": 0, "applied": 1}
    # The one statement found nothing and changed nothing; the steps matched and adopted.
    assert verbs[0] == "WITH" and "SELECT" in verbs[1:]
    with db.transaction() as session:
        row = session.get(Message, message_id, populate_existing=True)
        assert row is not None
        assert (row.status, row.provider_message_id) == ("delivered", "wamid.LATE-ANSWER")
        events = session.scalars(
            select(MessageEvent.to_status).where(
                MessageEvent.message_id == message_id, MessageEvent.source == "webhook"
            )
        ).all()
    assert events == ["delivered"]


def test_a_status_with_no_message_at_all_parks_through_the_fallback(
    db: Database, world: World
) -> None:
    recorded = record(db, incoming(world, "wamid.NOBODY", "delivered", 20))
    (stored,) = recorded.to_apply
    assert apply_recorded(db, recorded, at(30)) == {"duplicate": 0, "parked": 1}
    with db.transaction() as session:
        row = session.get(WebhookStatus, stored.id, populate_existing=True)
        assert row is not None and (row.result, row.applied_at, row.tries) == ("parked", None, 1)
        assert (
            session.scalars(
                select(MessageEvent).where(MessageEvent.dedupe_key == stored.dedupe_key)
            ).all()
            == []
        )


def test_a_duplicate_delivery_through_the_fast_path_adds_nothing(
    db: Database, world: World
) -> None:
    message_id = sent_message(db, world, "wamid.TWICE")
    first = record(db, incoming(world, "wamid.TWICE", "delivered", 20))
    assert apply_recorded(db, first, at(30)) == {"duplicate": 0, "applied": 1}
    with statements(db) as verbs:
        again = record(db, incoming(world, "wamid.TWICE", "delivered", 21), seconds=40)
    assert verbs == ["WITH"]  # the raw delivery and its status row: one statement
    assert (again.to_apply, again.duplicates) == ([], 1)
    assert apply_recorded(db, again, at(40)) == {"duplicate": 1}
    with db.transaction() as session:
        # Both raw deliveries are kept; one status row, one event.
        assert len(session.scalars(select(WebhookDelivery.id)).all()) == 2
        assert len(session.scalars(select(WebhookStatus.id)).all()) == 1
        events = session.scalars(
            select(MessageEvent).where(MessageEvent.to_status == "delivered")
        ).all()
        assert [(e.message_id, e.provider_time) for e in events] == [(message_id, at(20))]


def test_an_event_already_recorded_under_the_key_makes_the_status_a_duplicate(
    db: Database, world: World
) -> None:
    message_id = sent_message(db, world, "wamid.KEYED")
    recorded = record(db, incoming(world, "wamid.KEYED", "delivered", 20))
    (stored,) = recorded.to_apply
    with db.transaction() as session:  # an event under the status's key, not applied
        apply_status(
            session,
            message_id,
            Status.DELIVERED,
            Source.WEBHOOK,
            at(25),
            cycle=2,  # another cycle: refused as stale, recorded under the key all the same
            dedupe_key=stored.dedupe_key,
        )
    assert apply_recorded(db, recorded, at(30)) == {"duplicate": 1}
    with db.transaction() as session:
        row = session.get(Message, message_id, populate_existing=True)
        assert row is not None and (row.status, row.delivered_at) == ("sent", None)
        status_row = session.get(WebhookStatus, stored.id, populate_existing=True)
        assert status_row is not None
        assert (status_row.result, status_row.applied_at, status_row.message_id) == (
            "duplicate",
            at(30),
            message_id,
        )


def test_a_status_the_sweeper_finished_first_rolls_the_fast_path_back(
    db: Database, world: World
) -> None:
    message_id = sent_message(db, world, "wamid.SWEPT")
    recorded = record(db, incoming(world, "wamid.SWEPT", "read", 20))
    (stored,) = recorded.to_apply
    with db.transaction() as session:
        assert apply_webhook_status(session, stored.id, at(25)) == "applied"
    assert apply_recorded(db, recorded, at(30)) == {"duplicate": 1}
    with db.transaction() as session:
        row = session.get(WebhookStatus, stored.id, populate_existing=True)
        assert row is not None
        assert (row.result, row.applied_at, row.tries) == ("applied", at(25), 1)
        events = session.scalars(
            select(MessageEvent.received_at).where(MessageEvent.dedupe_key == stored.dedupe_key)
        ).all()
    assert events == [at(25)]
    assert outcome(db, message_id, stored.id)["message"]["status"] == "read"


def test_a_status_finished_first_without_an_event_leaves_nothing_of_the_one_statement(
    committed_db: Database,
) -> None:
    # Committed for real: the one statement then runs as a transaction of its own, with no
    # BEGIN or COMMIT around it, and has to undo itself. Another applier finished the
    # status first with no event under its key (as a stale or ignored status is finished).
    world = make_world(committed_db)
    message_id = sent_message(committed_db, world, "wamid.TAKEN")
    recorded = record(committed_db, incoming(world, "wamid.TAKEN", "delivered", 20))
    (stored,) = recorded.to_apply
    with committed_db.transaction() as session:
        session.execute(
            update(WebhookStatus)
            .where(WebhookStatus.id == stored.id)
            .values(applied_at=at(25), result="ignored", tries=1)
        )
    assert apply_recorded(committed_db, recorded, at(30)) == {"duplicate": 1}
    written = outcome(committed_db, message_id, stored.id)
    # Without the statement's own undo, the event and the move would have committed.
    assert written["message"]["status"] == "sent"
    assert written["events"] == []
    assert written["status"] == ("ignored", at(25), False, 1)


RUNS = 6


def run_together(*jobs: Any) -> list[Any]:
    barrier = threading.Barrier(len(jobs))
    results: list[Any] = [None] * len(jobs)
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            barrier.wait(timeout=10)
            results[index] = jobs[index]()
        except BaseException as exc:  # pragma: no cover - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors
    return results


@pytest.mark.parametrize("run", range(RUNS))
def test_the_fast_path_and_the_sweeper_racing_for_one_status_apply_it_once(
    committed_db: Database, run: int
) -> None:
    world = make_world(committed_db)
    message_id = sent_message(committed_db, world, f"wamid.RACE{run}")
    recorded = record(committed_db, incoming(world, f"wamid.RACE{run}", "delivered", 20))
    (stored,) = recorded.to_apply

    def sweeper() -> str:
        with committed_db.transaction() as session:
            return apply_webhook_status(session, stored.id, at(31))

    fast, swept = run_together(lambda: apply_recorded(committed_db, recorded, at(30)), sweeper)
    fast_result = "applied" if fast.get("applied") else "duplicate"
    assert sorted([fast_result, swept]) == ["applied", "duplicate"]
    written = outcome(committed_db, message_id, stored.id)
    assert written["message"]["status"] == "delivered"
    assert [(e["to_status"], e["applied"]) for e in written["events"]] == [("delivered", True)]
    assert written["status"][0] == "applied"


@pytest.mark.parametrize("run", range(RUNS))
def test_delivered_and_read_applied_at_once_converge_on_read(
    committed_db: Database, run: int
) -> None:
    world = make_world(committed_db)
    wamid = f"wamid.PAIR{run}"
    message_id = sent_message(committed_db, world, wamid)
    delivered = record(committed_db, incoming(world, wamid, "delivered", 20))
    read = record(committed_db, incoming(world, wamid, "read", 22))
    counts = run_together(
        lambda: apply_recorded(committed_db, delivered, at(30)),
        lambda: apply_recorded(committed_db, read, at(30)),
    )
    # Whichever came second either moved on from delivered or was refused as late.
    assert counts[1] == {"duplicate": 0, "applied": 1}
    assert counts[0] in ({"duplicate": 0, "applied": 1}, {"duplicate": 0, "refused": 1})
    written = outcome(committed_db, message_id, delivered.to_apply[0].id)
    message = written["message"]
    assert (message["status"], message["delivered_at"], message["read_at"]) == (
        "read",
        at(20),
        at(22),
    )


def test_sqlite_takes_the_step_by_step_path(tmp_path: Path) -> None:
    """`make run`'s embedded database: the same promises, without the WITH statements."""
    database = Database(
        f"sqlite:///{tmp_path / 'ratchet.db'}", correlation_key=derive_key(SECRET_KEY)
    )
    migrate.upgrade(database.engine)
    try:
        world = make_world(database)
        message_id = sent_message(database, world, "wamid.LITE")
        with statements(database) as verbs:
            first = record(database, incoming(world, "wamid.LITE", "delivered", 20))
            assert apply_recorded(database, first, at(30)) == {"duplicate": 0, "applied": 1}
        assert "WITH" not in verbs
        again = record(database, incoming(world, "wamid.LITE", "delivered", 20))
        assert apply_recorded(database, again, at(31)) == {"duplicate": 1}
        with database.one_connection() as pinned:
            late = record(pinned, incoming(world, "wamid.LITE", "sent", 5))
            assert apply_recorded(pinned, late, at(32)) == {"duplicate": 0, "refused": 1}
        with database.transaction() as session:
            row = session.get(Message, message_id)
            assert row is not None and row.status == "delivered"
    finally:
        database.dispose()
