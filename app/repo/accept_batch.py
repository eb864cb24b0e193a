"""A batch of acceptances in one statement: what a drain's record of its provider answers
mostly is (`record_batch` in `jobs/call.py`), on PostgreSQL.

`accept_at_once` (`app/repo/acceptance.py`) writes one acceptance in one statement: the
move `sending -> sent` with its values, the attempt's answer and the event. Here the same
writes, fenced the same way, are made for every acceptance of a batch at once, the rows
given as arrays (`unnest`): two statements a batch (this one, then the statuses parked
for the new ids) where there were two a message. Nothing else differs:

- each message moves only if it is still in the attempt and cycle the call was made in,
  still `sending`, and knows no other provider id; one that does not (a webhook got
  further, a lease taken over) is left untouched, and the caller records it the general
  way (`record_outcome`), as `accept_at_once`'s caller does when it writes nothing;
- the attempt's row is written only with its message's move (its join reads `moved`): the
  message row is locked first, as everywhere (`_accept_statement`'s reasons);
- the batch's message rows are locked in the order of their ids (`locked`), whatever order
  the calls ended in, as the bulk runner and the template hold lock theirs: in the order
  given, a drain's record and a template hold deadlocked (found by review, with the plan
  PostgreSQL takes on a large table: a nested loop over the given rows);
- the statuses parked for the ids are looked up after the statement, under the locks it
  took, and applied (`apply_parked`'s rule: the two cannot miss each other).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.orm import Session

from app.lifecycle import Source, Status
from app.repo.inbox import parked_status_ids_of
from app.repo.sql import is_postgresql
from app.repo.status_apply import apply_webhook_status


@dataclass(frozen=True, slots=True)
class Acceptance:
    message_id: int
    cycle: int
    attempt: int
    identity_id: int
    provider_message_id: str
    http_status: int | None
    response_body: str | None
    unknown_attempts: int
    had_unknown: bool


# The status and id tests are wrapped in `IS true` for `keyed`'s reason (app/repo/sql.py):
# each message is found by its key, never through a partial index on its status.
_ACCEPT_MANY = text(
    """
WITH given AS (
    SELECT * FROM unnest(
        CAST(:ids AS bigint[]), CAST(:cycles AS integer[]), CAST(:attempts AS integer[]),
        CAST(:pmids AS varchar[]), CAST(:unknown AS integer[]), CAST(:had AS boolean[]),
        CAST(:http_statuses AS integer[]), CAST(:bodies AS text[]), CAST(:details AS text[])
    ) AS given(id, cycle, attempt, pmid, unknown_attempts, had_unknown, http_status,
               response_body, detail)
),
locked AS (
    SELECT messages.id FROM messages
    WHERE messages.id = ANY(CAST(:ids AS bigint[]))
    ORDER BY messages.id
    FOR NO KEY UPDATE
),
moved AS (
    UPDATE messages SET
        status = :sent,
        sent_at = coalesce(messages.sent_at, :now),
        provider_message_id = given.pmid,
        lease_until = NULL,
        unknown_attempts = given.unknown_attempts,
        failure_class = NULL,
        had_unknown_outcome = messages.had_unknown_outcome OR given.had_unknown
    FROM given JOIN locked ON locked.id = given.id
    WHERE messages.id = given.id
        AND messages.cycle = given.cycle
        AND messages.attempt = given.attempt
        AND (messages.status = :sending) IS true
        AND (messages.provider_message_id IS NULL
             OR messages.provider_message_id = given.pmid) IS true
    RETURNING messages.id, messages.cycle, given.attempt, given.pmid, given.http_status,
        given.response_body, given.detail
),
finished AS (
    UPDATE attempts SET
        finished_at = :now,
        outcome = 'accepted',
        http_status = moved.http_status,
        provider_message_id = moved.pmid,
        error = CAST('null' AS json),  -- as `accept_at_once` writes None to this JSON
        response_body = moved.response_body
    FROM moved
    WHERE attempts.message_id = moved.id
        AND attempts.cycle = moved.cycle
        AND attempts.number = moved.attempt
    RETURNING attempts.id
),
logged AS (
    INSERT INTO message_events
        (message_id, cycle, source, kind, from_status, to_status, applied, received_at, detail)
    SELECT moved.id, moved.cycle, :worker, 'accepted', :sending, :sent, true, :now,
        CAST(moved.detail AS json)
    FROM moved
    RETURNING id
)
SELECT id, cycle, attempt FROM moved
"""
)


def accept_many(
    session: Session, accepted: Sequence[Acceptance], now: datetime
) -> set[tuple[int, int, int]]:
    """Record these acceptances as `accept_at_once` would each; returns the (message id,
    cycle, attempt) of those that moved to `sent` (the others are unchanged: record them
    the general way). A message given more than once is left to the general way whole:
    one statement cannot say which of its answers came first. Nothing on SQLite, or for an
    empty batch."""
    seen = Counter(a.message_id for a in accepted)
    accepted = [a for a in accepted if seen[a.message_id] == 1]
    if not accepted or not is_postgresql(session):
        return set()
    rows = session.execute(
        _ACCEPT_MANY,
        {
            "ids": [a.message_id for a in accepted],
            "cycles": [a.cycle for a in accepted],
            "attempts": [a.attempt for a in accepted],
            "pmids": [a.provider_message_id for a in accepted],
            "unknown": [a.unknown_attempts for a in accepted],
            "had": [a.had_unknown for a in accepted],
            "http_statuses": [a.http_status for a in accepted],
            "bodies": [a.response_body for a in accepted],
            "details": [_detail(a) for a in accepted],
            "now": now,
            "sent": Status.SENT.value,
            "sending": Status.SENDING.value,
            "worker": Source.WORKER.value,
        },
    ).all()
    moved = {(row.id, row.cycle, row.attempt) for row in rows}
    by_identity: dict[int, list[str]] = {}
    for a in accepted:
        if (a.message_id, a.cycle, a.attempt) in moved:
            by_identity.setdefault(a.identity_id, []).append(a.provider_message_id)
    for identity_id, pmids in by_identity.items():
        for status_id in parked_status_ids_of(session, identity_id, pmids):
            apply_webhook_status(session, status_id, now)
    return moved


def _detail(accepted: Acceptance) -> str:
    """The event's detail, as JSON's serialiser writes it for `accept_at_once`."""
    return json.dumps({"provider_message_id": accepted.provider_message_id})
