"""What a statement's plan reads, for the tests that hold the repo's lookups to a handful of
rows: each statement run once more under `EXPLAIN ANALYZE` in a savepoint rolled back at
once (`plans_of`), the rows each scan of a plan read (`rows_read`), and a delivered
history to look past (`delivered_history`). PostgreSQL only.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event, text

from app.db import Database

from ..conftest import T0


def rows_read(plan: dict[str, Any]) -> list[tuple[str, str, int]]:
    """(node type, index or table, rows it read) for every scan in the plan: the rows it
    returned and those a filter or a recheck then threw away."""
    found = []
    loops = int(plan.get("Actual Loops", 1))  # the row counts are per loop
    if plan.get("Rows Removed by Join Filter"):
        removed = int(plan["Rows Removed by Join Filter"]) * loops
        found.append((plan["Node Type"], "join filter", removed))
    if "Scan" in plan["Node Type"]:
        name = plan.get("Index Name") or plan.get("Relation Name") or ""
        read = sum(
            int(plan.get(key, 0))
            for key in ("Actual Rows", "Rows Removed by Filter", "Rows Removed by Index Recheck")
        )
        found.append((plan["Node Type"], name, read * loops))
    for child in plan.get("Plans", []):
        found += rows_read(child)
    return found


@contextmanager
def plans_of(
    database: Database, kinds: tuple[str, ...] = ("SELECT", "UPDATE", "WITH")
) -> Iterator[list[tuple[str, Any]]]:
    """(statement, its EXPLAIN ANALYZE plan) for each statement run inside that starts with
    one of `kinds`; an executemany's plan is that of its first parameters."""
    plans: list[tuple[str, Any]] = []

    def before(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if not statement.lstrip().upper().startswith(kinds):
            return
        if isinstance(parameters, list | tuple) and parameters and isinstance(parameters[0], dict):
            parameters = parameters[0]
        cursor.execute("SAVEPOINT plan_check")
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", parameters)
        plans.append((statement, cursor.fetchone()[0]))
        cursor.execute("ROLLBACK TO SAVEPOINT plan_check")

    event.listen(database.engine, "before_cursor_execute", before)
    try:
        yield plans
    finally:
        event.remove(database.engine, "before_cursor_execute", before)


MESSAGES = text(
    """
    INSERT INTO messages (tenant_id, identity_id, recipient, lane, body_text, fingerprint,
        status, cycle, provider_key_cycle, attempt, unknown_attempts, rate_limited_attempts,
        had_unknown_outcome, provider_message_id, queued_at, sending_at, sent_at,
        delivered_at, created_at)
    SELECT :tenant, :identity, '1555' || lpad(n::text, 7, '0'), 'campaign', 'hello',
        md5(n::text) || md5(n::text), :status, 1, 1, 1, 0, 0, false,
        CASE WHEN :with_ids THEN 'wamid.' || :tag || '.' || n END, :t0, :t0, :t0,
        :delivered_at, :t0
    FROM generate_series(1, :count) AS n
    """
)


STATUSES = text(
    """
    INSERT INTO webhook_statuses (delivery_id, provider, identity_id, routing_id, dedupe_key,
        provider_message_id, status, received_at, payload, tries, applied_at, result)
    SELECT :delivery, 'whatsapp', :identity, '106540352242922', :tag || '-' || n,
        'wamid.' || :tag || '.' || n, 'delivered', :t0, '{}'::json, 0, :applied_at, :result
    FROM generate_series(1, :count) AS n
    """
)


def delivered_history(session: Any, common: dict[str, Any], count: int) -> int:
    """`count` delivered messages (`wamid.old.<n>`) of the identity in `common`, each with
    its applied status under one raw delivery; that delivery's id."""
    delivery = session.execute(
        text(
            "INSERT INTO webhook_deliveries (provider, identity_id, headers, body, "
            "received_at) VALUES ('whatsapp', :identity, '{}', '{}', :t0) RETURNING id"
        ),
        common,
    ).scalar_one()
    session.execute(
        MESSAGES,
        {**common, "status": "delivered", "tag": "old", "delivered_at": T0}
        | {"with_ids": True, "count": count},
    )
    session.execute(
        STATUSES,
        {**common, "delivery": delivery, "tag": "old", "applied_at": T0}
        | {"result": "applied", "count": count},
    )
    return int(delivery)
