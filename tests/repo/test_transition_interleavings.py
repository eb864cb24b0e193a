"""Random interleavings of claims, outcomes, webhooks (duplicated and reordered) and
requeues, applied through the real SQL on PostgreSQL, checked after every step."""

from __future__ import annotations

from datetime import datetime, timedelta

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from app.db import Database
from app.lifecycle import RANK, TIMESTAMP_FIELD, Source, Status
from app.repo.messages import get_message
from app.repo.requeues import RequeueRefusedError, requeue_message
from app.repo.transitions import apply_status

from ..conftest import T0
from ..factories import make_message, make_world

WEBHOOK_STATUSES = ["sent", "delivered", "read", "failed"]


class MessageLife(RuleBasedStateMachine):
    database: Database
    world = None

    @initialize()
    def create(self) -> None:
        if MessageLife.world is None:
            MessageLife.world = make_world(self.database)
        self.message_id = make_message(self.database, MessageLife.world)
        self.clock = T0
        self.snapshot = self.read()
        self.requeued = False
        self.last_source: Source | None = None

    def read(self) -> dict[str, object]:
        with self.database.transaction() as session:
            message = get_message(session, self.message_id)
            assert message is not None
            row = {name: getattr(message, name) for name in TIMESTAMP_FIELD.values()}
            row.update(status=message.status, cycle=message.cycle)
            return row

    def tick(self) -> datetime:
        self.clock += timedelta(seconds=1)
        return self.clock

    def move(self, target: str, source: Source, **kwargs: object) -> None:
        self.last_source = source
        with self.database.transaction() as session:
            apply_status(session, self.message_id, Status(target), source, self.tick(), **kwargs)  # type: ignore[arg-type]

    @rule()
    def claim(self) -> None:
        self.move("sending", Source.WORKER)

    @rule(outcome=st.sampled_from(["sent", "failed"]))
    def worker_outcome(self, outcome: str) -> None:
        self.move(outcome, Source.WORKER)

    @rule(
        status=st.sampled_from(WEBHOOK_STATUSES),
        provider_seconds=st.integers(min_value=-30, max_value=30),
        wamid=st.sampled_from(["wamid.A", "wamid.B"]),
    )
    def webhook(self, status: str, provider_seconds: int, wamid: str) -> None:
        # Reordered: the provider's time may lie before or after ours. Duplicated: the
        # same (wamid, status) drawn twice is the same dedupe key.
        self.move(
            status,
            Source.WEBHOOK,
            provider_time=self.clock + timedelta(seconds=provider_seconds),
            dedupe_key=f"whatsapp:{wamid}:{status}:{self.message_id}",
        )

    @rule()
    def requeue(self) -> None:
        try:
            with self.database.transaction() as session:
                requeue_message(
                    session,
                    self.message_id,
                    self.tick(),
                    actor="hypothesis",
                    force=True,
                    reason="test",
                )
            self.requeued = True
        except RequeueRefusedError:
            self.requeued = False

    @invariant()
    def only_forward(self) -> None:
        before, after = self.snapshot, self.read()
        self.snapshot = after
        old, new = str(before["status"]), str(after["status"])
        if after["cycle"] != before["cycle"]:
            # Only a requeue changes the cycle, and only from failed to queued.
            assert self.requeued and old == "failed" and new == "queued"
            assert after["cycle"] == before["cycle"] + 1  # type: ignore[operator]
            self.requeued = False
            return
        if old == "failed":
            assert new == "failed", "failed was left without a requeue"
        elif new != "failed":
            assert RANK[Status(new)] >= RANK[Status(old)], f"moved backwards {old} -> {new}"
        elif old == "queued":
            # Only a worker fails a message nobody has claimed: its validity ended first
            # (`expired`, never sent).
            assert self.last_source is Source.WORKER, f"failed from queued by {self.last_source}"
        else:
            assert old in ("sending", "sent"), f"failed from {old}"
        if new == "sending":
            assert old in ("queued", "sending"), f"re-entered sending from {old}"
        for column in TIMESTAMP_FIELD.values():
            if before[column] is not None:
                assert after[column] == before[column], f"{column} overwritten"
        self.requeued = False
        self.last_source = None


def test_random_interleavings_never_move_a_message_backwards(db: Database) -> None:
    MessageLife.database = db
    MessageLife.world = None
    run_state_machine_as_test(MessageLife, settings=settings(stateful_step_count=30))
