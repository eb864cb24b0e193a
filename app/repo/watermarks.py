"""Messenger's watermarks, matched to messages: the one step the other providers lack.

A `message_deliveries` without `mids`, or a `message_reads`, says "every message of this
thread sent at or before this instant was delivered / read" (Meta's clock, ms). This module
answers only "which messages are those": the thread is the identity (the Page or Instagram
account) and the recipient (the PSID / IGSID); a message counts when its current send
call started at or before the watermark, by our clock (`stamp_call_start`: the call's
real start, written with its outcome, never the claim's time, which a batch queued behind
busy call threads may precede by seconds). `watermark_statuses` (step 1c of
`app/reconcile.py`) turns each match into an ordinary status under that message's provider
id, so it goes through the same store, dedupe and forward-only guard as any other.

A message whose send answer has not been recorded yet (no provider id) is not matched:
there is no id to store the status under. One whose provider id came from the provider
first (an echo, while the call's answer was lost) stands until then on the provider's own
time for it (`record_provider_id`). Watermarks are cumulative, so the thread's next
delivery or read covers it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.lifecycle import PROVIDER_WORDS, RANK, Status
from app.models import Message
from app.providers.base import Watermark
from app.repo.claims import Claim
from app.repo.inbox import IncomingStatus


def stamp_call_start(session: Session, claim: Claim, provider: str, started: datetime) -> None:
    """Record when this attempt's call really started (our clock, taken just before the
    request), in the transaction that records its outcome, so the provider id and the
    stamp become visible together. Fenced on the attempt: a taken-over one writes nothing.
    Only for the providers whose receipts are watermarks (one statement the others skip)."""
    if provider not in WATERMARKED:
        return
    session.execute(
        update(Message)
        .where(
            Message.id == claim.message_id,
            Message.cycle == claim.cycle,
            Message.attempt == claim.attempt,
        )
        .values(request_started_ms=int(started.timestamp() * 1000))
        .execution_options(synchronize_session=False)
    )


# Providers whose receipts are watermarks: only their sends need the call's start.
WATERMARKED = frozenset({"messenger", "instagram"})

# No tolerance. A wrong `delivered`/`read` can never be undone (statuses only move forward)
# and hides a later `failed`; a missed one is corrected by the thread's next watermark,
# since they are cumulative. So a message whose call started after the watermark by our
# clock is never matched, even if Meta's clock runs behind ours.


@dataclass(frozen=True, slots=True)
class WatermarkMatch:
    message_id: int
    provider_message_id: str


def messages_under_watermark(
    session: Session,
    identity_id: int,
    recipient: str,
    watermark_ms: int,
    target: Status,
) -> list[WatermarkMatch]:
    """The thread's messages a watermark moves to `target`: sent (their request started)
    at or before it, with a provider id, and still below `target`. Anything at or above it,
    or `failed`, is left out here; the guard would refuse it anyway."""
    below = [status.value for status, rank in RANK.items() if 0 < rank < RANK[target]]
    rows = session.execute(
        select(Message.id, Message.provider_message_id)
        .where(
            Message.identity_id == identity_id,
            Message.recipient == recipient,
            Message.request_started_ms <= watermark_ms,
            Message.provider_message_id.is_not(None),
            Message.status.in_(below),
        )
        .order_by(Message.id)
    )
    return [WatermarkMatch(row.id, row.provider_message_id) for row in rows]


def watermark_statuses(
    session: Session, provider: str, watermarks: list[Watermark], ids: dict[str, int]
) -> list[IncomingStatus]:
    """Step 1c, for Messenger's `message_deliveries` without `mids` and its `message_reads`
    (Instagram's `messaging_seen`): each watermark says "every message of this thread
    (the Page or account, and the PSID / IGSID) sent at or before this instant". It runs
    before the statuses are stored, in `record_delivery`'s transaction: each covered
    message becomes one ordinary status under its provider id, so it is stored, deduped
    (a later per-mid receipt for it is a duplicate) and matched by id (1a), and the guard
    decides as ever: a watermark never moves a message backwards, nor another thread's.
    Watermarks under identities we do not know match nothing; their raw delivery is kept."""
    found: list[IncomingStatus] = []
    for mark in watermarks:
        identity_id = ids.get(mark.routing_id)
        target = PROVIDER_WORDS.get(mark.status)
        if identity_id is None or target is None:
            continue
        for covered in messages_under_watermark(
            session, identity_id, mark.recipient, mark.watermark_ms, target
        ):
            found.append(
                IncomingStatus(
                    identity_id=identity_id,
                    routing_id=mark.routing_id,
                    provider=provider,
                    provider_message_id=covered.provider_message_id,
                    status=mark.status,
                    provider_time=mark.provider_time,
                    raw={"watermark": mark.watermark_ms, "event": mark.raw},
                )
            )
    return found
