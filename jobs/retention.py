"""The sweeper's retention step: purge what is past each tenant's retention, a batch at a
time, within a share of the pass (app/repo/retention.py says what goes and what stays).

Each batch is its own short transaction, so a purge never holds locks for longer than one
batch takes, and a backlog (retention just shortened, or a new installation's first pass
over a year of history) is worked off over several passes instead of stalling one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from app.db import Database
from app.repo.callback_retention import purge_callbacks
from app.repo.retention import cutoffs, identities_of, purge_deliveries, purge_messages

BATCH = 200
# Seconds of a sweep pass the purge may take (a batch at least).
SHARE_SECONDS = 0.5


@dataclass(frozen=True, slots=True)
class Purged:
    messages: int = 0
    deliveries: int = 0
    callbacks: int = 0


def purge_content(
    db: Database,
    now: datetime,
    *,
    batch: int = BATCH,
    budget_seconds: float = SHARE_SECONDS,
    timer: Callable[[], float] = time.monotonic,
) -> Purged:
    """Purge batch after batch, every tenant in turn, until nothing is due or the budget
    is spent (the next pass goes on from the oldest left)."""
    deadline = timer() + budget_seconds
    messages = deliveries = callbacks = 0
    with db.transaction() as session:
        due = [(cutoff, identities_of(session, cutoff)) for cutoff in cutoffs(session, now)]
    for cutoff, identities in due:
        if cutoff.tenant_id is not None:
            while True:
                with db.transaction() as session:
                    done = purge_messages(session, cutoff, now, batch)
                messages += done
                if done < batch or timer() > deadline:
                    break
            while True:
                with db.transaction() as session:
                    done = purge_callbacks(session, cutoff, batch)
                callbacks += done
                if done < batch or timer() > deadline:
                    break
        for identity_id in identities:
            while True:
                with db.transaction() as session:
                    done = purge_deliveries(session, identity_id, cutoff.before, now, batch)
                deliveries += done
                if done < batch or timer() > deadline:
                    break
            if timer() > deadline:
                break
        if timer() > deadline:
            break
    return Purged(messages, deliveries, callbacks)
