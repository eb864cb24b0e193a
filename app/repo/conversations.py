"""Each conversation in order: the rule a drain's claim keeps (docs/design.md section 7).

On one identity and lane, a recipient's messages reach the provider in the order the API
accepted them (their ids): a message is not claimed while an earlier one of the same
conversation (identity, lane, recipient) is unresolved, that is still `queued` or
`sending` (in flight, or waiting for a retry or a verdict). An earlier message whose
template Meta holds (`app/repo/template_holds.py`) is left out: it is not claimable, and
would otherwise hold the rest of its conversation for as long as the hold lasts.

A retry holds the conversation for at most `hold` (`RATCHET_CONVERSATION_HOLD`, 60 s),
counted from the later of the earlier message's first claim and the later message's
acceptance; past that the later one goes, and its claim event names the message it
overtook. Only while the earlier one waits for its retry time or its verdict: one that is
due again (given back unsent, its retry time come, its lease lapsed) or in flight holds
the next whatever its age, so the two are never claimed in one batch nor called side by
side.

Both are SQL on the claim's own rows, so they hold across drains and workers: a claim in
another transaction that has not committed yet still shows the earlier message `queued`
to this one, which therefore waits. A message scheduled for later (`send_at`) joins its
conversation only when it comes due: until then it holds nothing back, and messages
accepted after it go first. The reply and campaign lanes are separate conversations
by design: a reply may overtake a campaign message to the same person.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import aliased

from app.lifecycle import Status
from app.models import Message
from app.repo.template_holds import not_template_held

_earlier = aliased(Message, name="earlier")

# How long a retry holds the rest of its conversation, unless configured.
HOLD = timedelta(seconds=60)
# The note a claim's event carries when it overtook an earlier message past the hold.
OVERTAKEN = "sent before message {}, which was still being retried"


def _earlier_unresolved(now: Any, identity_id: Any) -> list[Any]:
    """An earlier message of the claimed row's conversation, not yet resolved, not waiting
    for its `send_at` and not held by its template: read through `ix_messages_conversation`
    (partial on the waiting rows, so it follows the backlog)."""
    return [
        _earlier.identity_id == Message.identity_id,
        _earlier.lane == Message.lane,
        _earlier.recipient == Message.recipient,
        _earlier.status.in_([Status.QUEUED.value, Status.SENDING.value]),
        _earlier.id < Message.id,
        # Scheduled and not yet due: it is not in the conversation until then.
        or_(_earlier.not_before.is_(None), _earlier.not_before <= now),
        not_template_held(identity_id, _earlier),
    ]


def in_conversation_order(now: Any, since: Any, identity_id: Any = None) -> Any:
    """The claimed row is the next of its conversation: no earlier message unresolved,
    unless the one ahead has waited for a retry since before `since` (now less the hold)
    and still waits for its retry time or its verdict (never one `queued`, due again, or
    in flight). Values or bound parameters (`app/repo/claimable.py`)."""
    holding = or_(
        _earlier.sending_at.is_(None),
        _earlier.sending_at > since,
        and_(Message.queued_at.is_not(None), Message.queued_at > since),
        # Not waiting for a time to come: due now (claimable, so never in one batch with
        # the next), in flight (its outcome is a call away), or its lease lapsed (due).
        and_(
            _earlier.pending_verdict.is_(None),
            or_(
                _earlier.next_attempt_at.is_(None),
                _earlier.next_attempt_at <= now,
                _earlier.lease_until.is_not(None),
            ),
        ),
    )
    # A scalar subquery, never NOT EXISTS (an anti-join), in the order only
    # `ix_messages_conversation` gives (a drain's reads plan without sorts: see
    # `plan_without_sorts`): with statistics taken before a backlog, every partial index of
    # the waiting rows looks empty, and PostgreSQL read the whole of another one for each
    # row it claimed (`tests/repo/test_claim_plan.py`).
    return _latest(now, identity_id, holding).is_(None)


def overtaken_id(now: Any, identity_id: Any = None) -> Any:
    """A column for the claim's read: the latest earlier message of the row's conversation
    still unresolved (it is past its hold, or the row would not be claimable), or NULL."""
    return _latest(now, identity_id)


def _latest(now: Any, identity_id: Any, *also: Any) -> Any:
    return (
        select(_earlier.id)
        .where(*_earlier_unresolved(now, identity_id), *also)
        .order_by(_earlier.id.desc())
        .limit(1)
        .scalar_subquery()
    )
