"""The requeue both the dead-letter list and a message's page offer: one transaction for
the check, the move and the audit row, then the ring after the commit."""

from __future__ import annotations

from dataclasses import dataclass

from flask import abort

from app.auth import staff, tenant_scope
from app.db import get_db
from app.inputs import parse_id
from app.repo.requeues import MessageNotFoundError, RequeueOutcome, requeue_from_dashboard
from app.views.pages import now
from jobs.ringing import ring_message


def is_against_advice(action: str) -> bool:
    """The advice says not to send it again now (an opted-out recipient, a paused
    marketing window...): a requeue then takes a second, deliberate click."""
    return action.lower().startswith("do not resend")


def advice_not_read(action: str, ticked: str | None) -> Refused | None:
    """The refusal to give when the advice says not to resend and the box saying it was
    read is not ticked; None when the requeue may go ahead."""
    if not is_against_advice(action) or ticked == "1":
        return None
    return Refused(
        f"Not requeued: the advice is “{action}” Tick that you read it to requeue anyway."
    )


@dataclass(frozen=True, slots=True)
class Refused:
    """A requeue refused before it was tried, in the words the page shows."""

    words: str
    ok: bool = False


@dataclass(frozen=True, slots=True)
class Said:
    """What happened, in the words the page shows."""

    outcome: RequeueOutcome
    words: str
    ok: bool


def run_requeue(
    message_id: int, shown_cycle: int, *, force: bool = False, reason: str | None = None
) -> Said:
    try:
        with get_db().transaction() as session:
            outcome = requeue_from_dashboard(
                session,
                message_id,
                tenant_scope(),
                shown_cycle,
                now(),
                actor=staff().email,
                force=force,
                reason=reason,
            )
    except MessageNotFoundError:
        abort(404)
    if not outcome.requeued:
        return Said(outcome, f"Not requeued: {outcome.refusal}", ok=False)
    # 1. committed above; 2. only now tell Redis (a lost ring is re-rung by the sweeper).
    rung = ring_message(outcome.message_id, outcome.lane, outcome.identity_id)
    key = (
        "same provider key (an earlier outcome was unknown: the provider may hold it)"
        if outcome.same_key
        else "new provider key"
    )
    words = f"Requeued: cycle {outcome.cycle}, {key}."
    if force:
        words += " Forced, reason recorded."
    if not rung:
        words += " Redis is unreachable: the sweeper will send it within a minute."
    return Said(outcome, words, ok=True)


def shown_cycle(raw: str | None) -> int:
    cycle = parse_id(raw)
    if cycle is None:
        abort(400)
    return cycle
