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


@dataclass(slots=True)
class Cursor:
    """The turn a pass served last: the next pass starts at the one after it, so that every
    turn comes round in its order however many there are and however few a share serves.
    A sweeper process keeps one (`SWEEPER`); without one a pass starts at the first turn."""

    last: tuple[int, int, int] | None = None


SWEEPER = Cursor()
_KINDS = {"messages": 0, "callbacks": 1, "deliveries": 2}
_NONE = 2**63  # sorts after every id: the deliveries that named no identity come last

Turn = tuple[tuple[int, int, int], str, Callable[..., int]]


def _turns(db: Database, now: datetime) -> list[Turn]:
    """Every purge there may be work for, in a fixed order: by tenant, then messages,
    callbacks and each identity's deliveries."""
    with db.transaction() as session:
        due = [(cutoff, identities_of(session, cutoff)) for cutoff in cutoffs(session, now)]
    turns: list[Turn] = []
    for cutoff, identities in due:
        tenant = cutoff.tenant_id if cutoff.tenant_id is not None else _NONE
        if cutoff.tenant_id is not None:
            messages = partial(purge_messages, cutoff=cutoff, now=now)
            callbacks = partial(purge_callbacks, cutoff=cutoff)
            turns.append(((tenant, _KINDS["messages"], 0), "messages", messages))
            turns.append(((tenant, _KINDS["callbacks"], 0), "callbacks", callbacks))
        for identity_id in identities:
            deliveries = partial(
                purge_deliveries, identity_id=identity_id, before=cutoff.before, now=now
            )
            who = identity_id if identity_id is not None else _NONE
            turns.append(((tenant, _KINDS["deliveries"], who), "deliveries", deliveries))
    turns.sort(key=lambda turn: turn[0])
    return turns


def purge_content(
    db: Database,
    now: datetime,
    *,
    batch: int = BATCH,
    budget_seconds: float = SHARE_SECONDS,
    timer: Callable[[], float] = time.monotonic,
    cursor: Cursor | None = None,
) -> Purged:
    """Purge a batch at a time, taking turns between every tenant's messages, callbacks
    and each identity's deliveries, until nothing is due or the budget is spent (the next
    pass goes on from the oldest left).

    The budget is checked before every turn, one that finds nothing as well as one that
    purges: a pass ends within one batch of its share however slow the database is and
    however many turns have nothing due, so on a busy host the purge does not take more of
    it. The first turn always runs. Taking turns, from the one after the `cursor`'s last,
    keeps one tenant's backlog, or a backlog of messages, from holding every other purge
    back: each turn is served once a round, whatever lies between them."""
    deadline = timer() + budget_seconds
    done = {"messages": 0, "deliveries": 0, "callbacks": 0}
    turns = _turns(db, now)
    if cursor is not None and cursor.last is not None:
        start = next((n for n, turn in enumerate(turns) if turn[0] > cursor.last), 0)
        turns = turns[start:] + turns[:start]
    served = False
    while turns:
        left = []
        for order, kind, purge in turns:
            if served and timer() >= deadline:
                return Purged(**done)
            with db.transaction() as session:
                count = purge(session, batch=batch)
            served = True
            if cursor is not None:
                cursor.last = order
            done[kind] += count
            if count == batch:  # a full batch: there may be more
                left.append((order, kind, purge))
        turns = left
    return Purged(**done)
