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
from functools import partial

from app.db import Database
from app.repo.callback_retention import purge_callbacks
from app.repo.retention import cutoffs, identities_of, purge_deliveries, purge_messages

BATCH = 200
# Seconds of a sweep pass the purge may take: no batch starts past them (one always does).
SHARE_SECONDS = 0.25


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
    """Purge a batch at a time, taking turns between every tenant's messages, callbacks
    and each identity's deliveries, until nothing is due or the budget is spent (the next
    pass goes on from the oldest left).

    The budget is checked before each batch, not after a run of them: a pass ends within
    one batch of its share however slow the database is, so on a busy host the purge does
    not take more of it. Taking turns keeps one tenant's backlog, or a backlog of
    messages, from holding every other purge back for hours. `now` (the pass's time)
    picks the turn that starts."""
    deadline = timer() + budget_seconds
    done = {"messages": 0, "deliveries": 0, "callbacks": 0}
    with db.transaction() as session:
        due = [(cutoff, identities_of(session, cutoff)) for cutoff in cutoffs(session, now)]
    turns = []
    for cutoff, identities in due:
        if cutoff.tenant_id is not None:
            turns.append(("messages", partial(purge_messages, cutoff=cutoff, now=now)))
            turns.append(("callbacks", partial(purge_callbacks, cutoff=cutoff)))
        for identity_id in identities:
            purge = partial(
                purge_deliveries, identity_id=identity_id, before=cutoff.before, now=now
            )
            turns.append(("deliveries", purge))
    if turns:
        # Each pass starts at another turn: with more turns than a share has batches for,
        # every one still comes first now and then.
        start = int(now.timestamp() // 2) % len(turns)
        turns = turns[start:] + turns[:start]
    purged_any = False
    while turns:
        left = []
        for kind, purge in turns:
            # One batch that purges something always runs; then only within the share.
            if purged_any and timer() >= deadline:
                return Purged(**done)
            with db.transaction() as session:
                count = purge(session, batch=batch)
            done[kind] += count
            purged_any = purged_any or count > 0
            if count == batch:  # a full batch: there may be more
                left.append((kind, purge))
        turns = left
    return Purged(**done)
