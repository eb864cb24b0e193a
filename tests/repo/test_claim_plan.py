"""A drain's step (its claim, and its questions of what is due and what owes a verdict)
reads the rows it concerns and hardly any others, however long the identity's history and
whatever the statistics say.

Found in `bench/pacing.py`: ordered by `id`, the claim let PostgreSQL walk the primary key
from the table's first row (statistics taken with the backlog: the waiting rows rated as
spread evenly, where they sit after the whole history), or read and sort the identity's
whole lane through `ix_messages_last_claim` (statistics taken before it: the identity rated
at one row): about 2,000 rows per claim. `owed_verdicts` read the whole backlog through
`ix_messages_waiting` (10,000 rows, 13 ms a step), `count_due` the table from its first
row, and `earliest_due` the whole waiting set. The step's statements run once more under
`EXPLAIN ANALYZE` in a savepoint rolled back at once (`plans_of`), so the plans checked are
those of the exact SQL and values sent. The last test checks SQLite's plans of the claim
and the count."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from sqlalchemy import event, text

from app import migrate
from app.correlation import derive_key
from app.db import Database
from app.repo.claims import claim_batch
from app.repo.due import count_due, earliest_due, owed_verdicts
from app.shards import Shard

from ..conftest import SECRET_KEY, T0
from ..factories import make_world
from .plans import MESSAGES, plans_of, rows_read

HISTORY = 1500  # sent before the backlog, lower ids
BACKLOG = 1500
LIMIT = 10


@pytest.mark.parametrize("statistics", ["before the backlog", "with the backlog"])
def test_a_drain_step_reads_the_rows_it_claims_not_the_history(
    db: Database, app: Flask, statistics: str
) -> None:
    if db.engine.dialect.name != "postgresql":
        pytest.skip("the plan checked is PostgreSQL's")
    world = make_world(db)
    other = make_world(db, name="other", account_id="1000002")
    common = {"t0": T0, "delivered_at": None, "with_ids": False}
    # Another identity's rows first each time, then this one's.
    identities = [(other.tenant_id, other.identity_id), (world.tenant_id, world.identity_id)]
    with db.transaction() as session:
        for tenant, identity in identities:
            session.execute(
                MESSAGES,
                {**common, "tenant": tenant, "identity": identity}
                | {"status": "sent", "tag": "old", "count": HISTORY},
            )
        if statistics == "before the backlog":
            session.execute(text("ANALYZE messages"))  # (rolled back with the test)
        for tenant, identity in identities:  # the backlogs, after the whole history
            session.execute(
                MESSAGES,
                {**common, "tenant": tenant, "identity": identity}
                | {"status": "queued", "tag": "new", "count": BACKLOG},
            )
        if statistics == "with the backlog":
            session.execute(text("ANALYZE messages"))

    config = app.config["RATCHET"]
    with plans_of(db) as plans, db.transaction() as session:
        assert owed_verdicts(session, world.identity_id, "campaign", T0) == []
        due = count_due(session, world.identity_id, "campaign", T0, config, [])
        assert due == min(BACKLOG, config.drain_batch)
        first = claim_batch(
            session, world.identity_id, "campaign", LIMIT, T0, timedelta(seconds=30)
        )
        second = claim_batch(
            session, world.identity_id, "campaign", LIMIT, T0, timedelta(seconds=30)
        )
        # What a drain asks when nothing is due: the first lease to expire (the claims').
        assert earliest_due(session, world.identity_id, "campaign", T0) == T0 + timedelta(
            seconds=30
        )

    # Oldest first, and the second claim goes on where the first stopped.
    claimed = [claim.message_id for claim in first + second]
    assert len(claimed) == 2 * LIMIT and claimed == sorted(claimed)
    with db.transaction() as session:
        oldest = session.execute(
            text(
                "SELECT id FROM messages WHERE identity_id = :i AND status <> 'sent' "
                "ORDER BY id LIMIT :n"
            ),
            {"i": world.identity_id, "n": 2 * LIMIT},
        ).scalars()
        assert claimed == list(oldest)

    assert plans, "no statement was checked"
    for statement, plan in plans:
        scans = rows_read(plan[0]["Plan"])
        assert all(kind != "Seq Scan" for kind, _, _ in scans), (statement, scans)
        # The claimed rows (and those the first claim took, still in the waiting index as
        # `sending`) and the identity's row, or the count's batch (`drain_batch`, 100): at
        # most about a hundred, where a walk of the primary key or of the whole lane reads
        # thousands.
        most = max(3 * LIMIT, config.drain_batch + 1) + 2
        assert sum(rows for _, _, rows in scans) <= most, (statement, scans)


def test_a_shards_claim_reads_its_own_shards_rows_from_the_table_not_the_others(
    db: Database, app: Flask
) -> None:
    """A shard's key range is tested in `ix_messages_waiting` (its last column), so the
    rows of the lane's other shards are passed over in the index, never fetched from the
    table and thrown away by a filter (which would read the lane's backlog `count` times
    over for each claim)."""
    if db.engine.dialect.name != "postgresql":
        pytest.skip("the plan checked is PostgreSQL's")
    world = make_world(db)
    common = {"t0": T0, "delivered_at": None, "with_ids": False}
    ids = {"tenant": world.tenant_id, "identity": world.identity_id}
    with db.transaction() as session:
        session.execute(
            MESSAGES, {**common, **ids, "status": "sent", "tag": "old", "count": HISTORY}
        )
        session.execute(
            MESSAGES, {**common, **ids, "status": "queued", "tag": "new", "count": BACKLOG}
        )
        # Keys spread over every shard (rows inserted in SQL get no hash of their own).
        session.execute(text("UPDATE messages SET shard_key = id % 1024"))
        session.execute(text("ANALYZE messages"))
    shard = Shard(1, 4)
    low, high = shard.key_range()
    with plans_of(db) as plans, db.transaction() as session:
        claims = claim_batch(
            session, world.identity_id, "campaign", LIMIT, T0, timedelta(seconds=30), shard=shard
        )
        keys = session.execute(
            text("SELECT shard_key FROM messages WHERE id = ANY(:ids)"),
            {"ids": [claim.message_id for claim in claims]},
        ).scalars()
        assert all(low <= key < high for key in keys)
    assert len(claims) == LIMIT
    claim_plans = [plan for statement, plan in plans if "FOR NO KEY UPDATE" in statement]
    assert claim_plans, [statement for statement, _ in plans]
    for plan in claim_plans:
        scans = rows_read(plan[0]["Plan"])
        assert all(kind != "Seq Scan" for kind, _, _ in scans), scans
        assert sum(rows for _, _, rows in scans) <= 3 * LIMIT + 2, scans


HISTORY_SQLITE = text(
    """
    WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :count)
    INSERT INTO messages (tenant_id, identity_id, recipient, lane, body_text, fingerprint,
        status, cycle, provider_key_cycle, attempt, unknown_attempts, rate_limited_attempts,
        had_unknown_outcome, queued_at, created_at)
    SELECT :tenant, :identity, '1555' || i, 'campaign', 'hello', 'f' || i, :status, 1, 1, 0,
        0, 0, 0, :t0, :t0
    FROM n
    """
)


def test_on_sqlite_the_claim_and_the_count_read_the_waiting_rows_not_the_history(
    app: Flask, tmp_path: Path
) -> None:
    """SQLite (what `make run` uses) cannot prove the waiting rows' predicate from the due
    test's OR: without `is_waiting()` written out, the claim and `count_due` searched an
    index by identity and lane alone, reading the lane's whole history (16 ms for
    `count_due` with 50,000 sent messages). With it, the search is by the waiting status
    too (SQLite's own choice of index), or walks the waiting rows' index."""
    database = Database(
        f"sqlite:///{tmp_path / 'ratchet.db'}", correlation_key=derive_key(SECRET_KEY)
    )
    migrate.upgrade(database.engine)
    plans: list[tuple[str, list[str]]] = []

    def before(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM messages" in statement:
            cursor.execute(f"EXPLAIN QUERY PLAN {statement}", parameters)
            plans.append((statement, [str(row[-1]) for row in cursor.fetchall()]))

    try:
        world = make_world(database)
        common = {"tenant": world.tenant_id, "identity": world.identity_id, "t0": T0}
        with database.transaction() as session:
            session.execute(HISTORY_SQLITE, {**common, "status": "sent", "count": 300})
            session.execute(HISTORY_SQLITE, {**common, "status": "queued", "count": 30})
        config = app.config["RATCHET"]
        event.listen(database.engine, "before_cursor_execute", before)
        try:
            with database.transaction() as session:
                due = count_due(session, world.identity_id, "campaign", T0, config, [])
                claims = claim_batch(
                    session, world.identity_id, "campaign", LIMIT, T0, timedelta(seconds=30)
                )
        finally:
            event.remove(database.engine, "before_cursor_execute", before)
    finally:
        database.dispose()

    assert due == min(30, config.drain_batch) and len(claims) == LIMIT
    ordered = [(statement, steps) for statement, steps in plans if "id + 0" in statement]
    assert len(ordered) == 2, [statement for statement, _ in plans]
    for statement, steps in ordered:
        searches = [step for step in steps if step.startswith(("SEARCH messages", "SCAN messages"))]
        assert searches, (statement, steps)
        for step in searches:
            assert "ix_messages_waiting " in step or "status=?" in step, (statement, steps)
