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
from jobs.drain import ring_message


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
