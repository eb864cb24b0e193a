"""Messenger's watermarks, matched to messages: the one step the other providers lack.

A `message_deliveries` without `mids`, or a `message_reads`, says "every message of this
thread sent at or before this instant was delivered / read" (Meta's clock, ms). This module
answers only "which messages are those": the thread is the identity (the Page or Instagram
account) and the recipient (the PSID / IGSID); a message counts when its current send
request started at or before the watermark, give or take `TOLERANCE_MS` for the two
clocks. `app/reconcile.py` (step 1c) turns each match into an ordinary status under that
message's provider id, so it goes through the same store, dedupe and forward-only guard as
any other.

A message whose send answer has not been recorded yet (no provider id) is not matched:
there is no id to store the status under. Watermarks are cumulative, so the thread's next
delivery or read covers it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.lifecycle import RANK, Status
from app.models import Message

# Our clock stamps `request_started_ms` before the call; Meta stamps the message on arrival,
# later. Only our clock running ahead of Meta's can put a delivered message "after" the
# watermark: a second covers ordinary NTP skew without reaching the next message a person
# would send.
TOLERANCE_MS = 1000


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
    tolerance_ms: int = TOLERANCE_MS,
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
            Message.request_started_ms <= watermark_ms + tolerance_ms,
            Message.provider_message_id.is_not(None),
            Message.status.in_(below),
        )
        .order_by(Message.id)
    )
    return [WatermarkMatch(row.id, row.provider_message_id) for row in rows]
