"""Retention of status callbacks: a tenant's callbacks that are done with (delivered or
given up) go once older than its retention, with their attempts (the receiver's answers):
their payloads carry the recipient and the provider's words, which retention purges from
the message itself (app/repo/retention.py). Pending ones stay until they are done.

Deleted outright, a batch at a time, oldest first, only rows nobody else holds: nothing
reads a finished callback but the endpoint's page and a replay, and a message's sequence is
counted apart (`callback_sequences`), so the next change still numbers on.
"""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.callback_models import DELIVERED, GAVE_UP, Callback, CallbackEndpoint
from app.repo.retention import Cutoff


def purge_callbacks(session: Session, cutoff: Cutoff, batch: int) -> int:
    """One batch of the tenant's finished callbacks written before the cutoff (their
    attempts go with them, by the foreign key's cascade)."""
    assert cutoff.tenant_id is not None
    ids = list(
        session.scalars(
            select(Callback.id)
            .join(CallbackEndpoint, CallbackEndpoint.id == Callback.endpoint_id)
            .where(
                CallbackEndpoint.tenant_id == cutoff.tenant_id,
                Callback.state.in_([DELIVERED, GAVE_UP]),
                Callback.created_at < cutoff.before,
            )
            .order_by(Callback.created_at)
            .limit(batch)
            .with_for_update(of=Callback, skip_locked=True)
        )
    )
    if ids:
        session.execute(
            delete(Callback)
            .where(Callback.id.in_(ids))
            .execution_options(synchronize_session=False)
        )
    return len(ids)
