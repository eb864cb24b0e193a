"""Watermarks, in any order and any mix, move exactly the thread's messages they cover,
through the same store and guard as every status, and never move one back."""

from __future__ import annotations

import itertools
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from app.clock import utcnow
from app.db import Database
from app.lifecycle import RANK, Status
from app.models import Message
from app.providers.base import Watermark
from app.repo.acceptance import record_accepted
from app.repo.attempts import start_attempt
from app.repo.claims import claim_message
from app.repo.inbox import store_delivery, store_statuses
from app.repo.status_apply import apply_webhook_status
from app.repo.watermarks import stamp_call_start, watermark_statuses

from ..conftest import T0
from ..factories import World, make_message, make_world

PSID, OTHER_PSID = "psid-a", "psid-b"
LEASE = timedelta(seconds=25)
_pages = itertools.count(1)


def sent(
    db: Database, world: World, recipient: str, offset_ms: int, mid: str, queued_ms: int = 0
) -> int:
    """Claimed `queued_ms` before its call started at `offset_ms` (a batch waiting for call
    threads), and accepted."""
    started = T0 + timedelta(milliseconds=offset_ms)
    claimed_at = started - timedelta(milliseconds=queued_ms)
    message_id = make_message(db, world, recipient=recipient)
    with db.transaction() as session:
        claim = claim_message(session, message_id, claimed_at, LEASE)
        assert claim is not None
        start_attempt(session, claim, f"k-{mid}", claimed_at)
        stamp_call_start(session, claim, "messenger", started)
        record_accepted(session, claim, mid, started, unknown_attempts=0, had_unknown=False)
    return message_id


def apply(db: Database, page_id: str, identity_id: int, status: str, watermark_ms: int) -> None:
    """What `/webhooks/messenger` does with a watermark once it verified."""
    mark = Watermark(
        routing_id=page_id,
        recipient=PSID,
        status=status,
        watermark_ms=watermark_ms,
        provider_time=T0 + timedelta(milliseconds=watermark_ms - int(T0.timestamp() * 1000)),
    )
    now = utcnow()
    with db.transaction() as session:
        delivery_id = store_delivery(session, "messenger", identity_id, {}, "{}", now)
        incoming = watermark_statuses(session, "messenger", [mark], {page_id: identity_id})
        status_ids, _ = store_statuses(session, delivery_id, incoming, now)
    for status_id in status_ids:
        with db.transaction() as session:
            apply_webhook_status(session, status_id, now)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=30)
@given(
    starts=st.lists(st.integers(0, 20_000), min_size=1, max_size=5),
    marks=st.lists(
        st.tuples(st.sampled_from(["delivered", "read"]), st.integers(-3_000, 24_000)),
        min_size=1,
        max_size=5,
    ),
    other_start=st.integers(0, 20_000),
)
def test_watermarks_in_any_order_move_exactly_the_covered_messages_and_never_back(
    db: Database, starts: list[int], marks: list[tuple[str, int]], other_start: int
) -> None:
    n = next(_pages)
    page_id = f"page-{n}"
    world = make_world(db, name=f"t{n}", provider="messenger", account_id=page_id)
    ours = [sent(db, world, PSID, s, f"m{n}-{i}", queued_ms=3_500) for i, s in enumerate(starts)]
    theirs = sent(db, world, OTHER_PSID, other_start, f"m{n}-other")
    base = int(T0.timestamp() * 1000)
    expected = {message_id: RANK[Status.SENT] for message_id in ours}
    for status, at in marks:
        apply(db, page_id, world.identity_id, status, base + at)
        for message_id, start in zip(ours, starts, strict=True):
            if start <= at:
                expected[message_id] = max(expected[message_id], RANK[Status(status)])
        with db.transaction() as session:
            rows = {
                row.id: row.status
                for row in session.scalars(select(Message).where(Message.id.in_([*ours, theirs])))
            }
        assert {m: RANK[Status(rows[m])] for m in ours} == expected
        assert rows[theirs] == "sent"  # another thread's message is never touched
