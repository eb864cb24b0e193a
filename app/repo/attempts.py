"""An attempt's row, and the fence every write after the claim carries.

Every write after the claim carries `AND attempt = :mine AND cycle = :cycle` (`fenced`), so
a worker whose lease expired cannot overwrite the attempt that re-claimed the message. The
outcome is recorded by `app/repo/acceptance.py` (the provider accepted),
`app/repo/failures.py` (a retry, a failure, a verdict) or `app/repo/give_back.py` (no call
made, or the sender found broken).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from sqlalchemy import Table, insert, update
from sqlalchemy.orm import Session

from app.models import Attempt, Message
from app.repo.claims import Claim

_attempts = cast(Table, Attempt.__table__)


def start_attempt(
    session: Session,
    claim: Claim,
    provider_key: str,
    now: datetime,
    *,
    rows: list[dict[str, Any]] | None = None,
) -> None:
    """The attempt's row, written now; given `rows`, its values are added to them instead,
    for `insert_attempts` to write a batch's rows in one INSERT (a drain's claim)."""
    values = {
        "message_id": claim.message_id,
        "cycle": claim.cycle,
        "number": claim.attempt,
        "provider_key": provider_key,
        "started_at": now,
    }
    if rows is not None:
        rows.append(values)
        return
    session.add(Attempt(**values))
    session.flush()


def insert_attempts(session: Session, rows: list[dict[str, Any]]) -> None:
    """The attempt rows `start_attempt` gathered, in one INSERT and without ORM objects
    (the unit of work's flush of a batch's rows cost a fifteenth of a drain's CPU)."""
    if rows:  # on the Connection: through the Session, a Table's INSERT is the ORM's bulk one
        session.connection().execute(insert(_attempts), rows)


def finish_attempt(
    session: Session,
    claim: Claim,
    now: datetime,
    outcome: str,
    *,
    http_status: int | None = None,
    provider_message_id: str | None = None,
    error: dict[str, Any] | None = None,
    response_body: str | None = None,
    unmarked_only: bool = False,
) -> None:
    """The claim's attempt row finished with its outcome; `unmarked_only`: unless it has
    one already (a re-claim's `mark_lost_attempt`)."""
    row = [
        Attempt.message_id == claim.message_id,
        Attempt.cycle == claim.cycle,
        Attempt.number == claim.attempt,
    ]
    if unmarked_only:
        row.append(Attempt.outcome.is_(None))
    session.execute(
        update(Attempt)
        .where(*row)
        .values(
            finished_at=now,
            outcome=outcome,
            http_status=http_status,
            provider_message_id=provider_message_id,
            error=error,
            response_body=response_body,
        )
    )


def mark_lost_attempt(session: Session, claim: Claim, now: datetime) -> None:
    """The attempt before a lease-expired re-claim never reported: its outcome is unknown."""
    session.execute(
        update(Attempt)
        .where(
            Attempt.message_id == claim.message_id,
            Attempt.cycle == claim.cycle,
            Attempt.number == claim.attempt - 1,
            Attempt.finished_at.is_(None),
        )
        .values(outcome="unknown", error={"message": "the worker's lease expired mid-call"})
    )


def fenced(claim: Claim) -> list[Any]:
    return [
        Message.id == claim.message_id,
        Message.cycle == claim.cycle,
        Message.attempt == claim.attempt,
    ]
