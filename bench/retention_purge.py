"""Retention's purge: how fast it goes, and what it costs webhook intake meanwhile.

Fills `--messages` delivered messages 40 days old (past the default 30 days), each with an
attempt holding a provider answer body and a raw webhook delivery with its applied status;
then runs gunicorn (`wsgi:app`, 2 sync workers) and drives signed single-status WhatsApp
deliveries through it in rounds (bench/webhook_rate.py's driver and bodies), alternating
rounds with the purge idle and rounds with the purge running as the sweeper runs it: its
share of a pass in batches (`jobs/retention.py`), then the rest of a 2 s pass asleep, in a
thread of this process. A purging round starts with a pass and lasts about
`--round-seconds` (three passes; its deliveries are sized from a first round at the idle
rate), so it holds the purge's share of its time whatever the phase; an idle round starts
only once the last pass has ended. Printed: the purge's rate (messages and deliveries a
second of purging), the share of the purging rounds it ran, the webhook rate and p99 with
and without it, and their ratio. Goal: >= 0.8x.

    .venv/bin/python bench/retention_purge.py [--messages 200000] [--rounds 10]
        [--round-seconds 6] [--deliveries N] [--continuous]

`--continuous` purges without pause (the worst case: a backlog and no other work).
Uses the database and Redis of bench/common.py (BENCH_DATABASE_URL, BENCH_REDIS_URL).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import text

from bench.common import (
    BenchBroke,
    Processes,
    goal,
    header,
    make_app,
    managed,
    percentile,
    reset_services,
)
from bench.webhook_rate import Side, create_world, run_round, start_side

OLD = """
INSERT INTO messages (tenant_id, identity_id, recipient, lane, body_text, fingerprint,
    status, cycle, provider_key_cycle, attempt, unknown_attempts, rate_limited_attempts,
    had_unknown_outcome, provider_message_id, queued_at, sending_at, sent_at, delivered_at,
    created_at)
SELECT :tenant, :identity, '1555' || lpad(n::text, 7, '0'), 'campaign',
    'Your order ' || n || ' has shipped', md5(n::text) || md5(n::text), 'delivered', 1, 1, 1,
    0, 0, false, 'wamid.old.' || n, :at, :at, :at, :at, :at
FROM generate_series(CAST(:low AS bigint), CAST(:high AS bigint)) AS n
"""
ATTEMPTS = """
INSERT INTO attempts (message_id, cycle, number, provider_key, started_at, finished_at,
    outcome, http_status, provider_message_id, response_body)
SELECT id, 1, 1, md5(id::text), created_at, created_at, 'accepted', 200, provider_message_id,
    '{"messaging_product":"whatsapp","contacts":[{"input":"' || recipient || '"}]}'
FROM messages WHERE id BETWEEN CAST(:low AS bigint) AND CAST(:high AS bigint)
"""
DELIVERIES = """
INSERT INTO webhook_deliveries (id, provider, identity_id, headers, body, received_at)
SELECT n, 'whatsapp', :identity, '{"X-Hub-Signature-256": "sha256=00"}',
    '{"entry":[{"changes":[{"value":{"statuses":[{"id":"wamid.old.' || n || '"}]}}]}]}', :at
FROM generate_series(CAST(:low AS bigint), CAST(:high AS bigint)) AS n
"""
STATUSES = """
INSERT INTO webhook_statuses (delivery_id, provider, identity_id, routing_id, dedupe_key,
    provider_message_id, status, received_at, payload, tries, applied_at, result, message_id)
SELECT n, 'whatsapp', :identity, '106540352242922', 'old-' || n, 'wamid.old.' || n,
    'delivered', :at, '{"status": "delivered", "recipient_id": "15551234567"}'::json, 1, :at,
    'applied', n
FROM generate_series(CAST(:low AS bigint), CAST(:high AS bigint)) AS n
"""


def fill(db: Any, identity_id: int, count: int) -> None:
    at = time.time()
    from datetime import UTC, datetime

    old = datetime.now(UTC) - timedelta(days=40)
    step = 50_000
    with db.transaction() as session:
        tenant = session.execute(
            text("SELECT tenant_id FROM identities WHERE id = :i"), {"i": identity_id}
        ).scalar_one()
    for low in range(1, count + 1, step):
        high = min(count, low + step - 1)
        values = {"tenant": tenant, "identity": identity_id, "at": old, "low": low}
        values["high"] = high
        with db.transaction() as session:
            for statement in (OLD, ATTEMPTS, DELIVERIES, STATUSES):
                session.execute(text(statement), values)
    with db.transaction() as session:
        session.execute(
            text(
                "SELECT setval('webhook_deliveries_id_seq', "
                "(SELECT max(id) FROM webhook_deliveries))"
            )
        )
    with db.engine.connect() as connection:
        connection.execution_options(isolation_level="AUTOCOMMIT").execute(
            text("VACUUM ANALYZE messages, attempts, webhook_deliveries, webhook_statuses")
        )
    print(
        f"filled {count:,} delivered messages 40 days old, each with an attempt, a raw "
        f"delivery and its status, in {time.time() - at:.0f} s",
        flush=True,
    )


class Purger:
    """The sweeper's retention step in a thread: a share of each 2 s pass, or all of it.

    A purging round starts with a pass (`begin`), so a round of two passes' length holds
    the purge's share of them whatever the phase; an idle round waits until the pass
    under way has ended (`end`), so no purge spills into it."""

    PASS_SECONDS = 2.0

    def __init__(self, db: Any, continuous: bool) -> None:
        self.db = db
        self.continuous = continuous
        self.running = threading.Event()
        self.kick = threading.Event()  # cuts the pause between passes short
        self.started = threading.Event()
        self.idle = threading.Event()
        self.idle.set()
        self.stop = threading.Event()
        self.messages = self.deliveries = 0
        self.busy = 0.0
        from jobs.retention import Cursor

        self.cursor = Cursor()  # as the sweeper keeps one across its passes
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def begin(self) -> None:
        """Purge from now on, a pass starting at once."""
        self.started.clear()
        self.running.set()
        self.kick.set()
        if not self.started.wait(30):
            raise BenchBroke("the purge did not start")

    def end(self) -> None:
        """Stop purging, once the pass under way has ended."""
        self.running.clear()
        self.kick.set()
        if not self.idle.wait(60):
            raise BenchBroke("the purge did not end its pass")

    def run(self) -> None:
        from app.clock import utcnow
        from jobs.retention import SHARE_SECONDS, purge_content

        while not self.stop.is_set():
            if not self.running.wait(0.1):
                continue
            self.kick.clear()
            self.idle.clear()
            self.started.set()
            started = time.perf_counter()
            done = purge_content(
                self.db, utcnow(), budget_seconds=SHARE_SECONDS, cursor=self.cursor
            )
            took = time.perf_counter() - started
            self.idle.set()
            self.messages += done.messages
            self.deliveries += done.deliveries
            self.busy += took
            if not self.continuous:
                self.kick.wait(max(0.0, self.PASS_SECONDS - took))


class StartsPurging:
    """The bench's processes as `run_round` sees them, starting a purge pass just before
    the round's driver starts (its bodies are ready by then)."""

    def __init__(self, processes: Processes, purger: Purger) -> None:
        self.processes = processes
        self.purger = purger

    def start(self, name: str, argv: list[str], env: dict[str, str], **kwargs: Any) -> Any:
        if "-driver-" in name:
            self.purger.begin()
        return self.processes.start(name, argv, env, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.processes, name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=10, help="alternating rounds (10)")
    parser.add_argument(
        "--round-seconds",
        type=float,
        default=6.0,
        help="each round's length, three sweeper passes (6): its deliveries from a first round",
    )
    parser.add_argument("--deliveries", type=int, help="webhooks per side instead, in all")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--continuous", action="store_true", help="purge without pause")
    args = parser.parse_args()
    header("retention: the purge's rate, and webhook intake while it runs")
    reset_services()
    app = make_app()
    idle, purging = Side("idle", "wsgi:app"), Side("purging", "wsgi:app")
    purge_seconds = 0.0
    try:
        with app.app_context(), managed() as processes:
            from app.db import get_db

            db = get_db()
            identity_id = create_world(db)
            fill(db, identity_id, args.messages)
            purger = Purger(db, args.continuous)
            start_side(processes, idle, 2)
            purging.port, purging.process = idle.port, idle.process  # one server, two states
            run_round(processes, idle, db, identity_id, "warm", 100, args.concurrency, False)
            sizing = Side("sizing", "wsgi:app", idle.port, idle.process)
            run_round(processes, sizing, db, identity_id, "size", 200, args.concurrency)
            # Rounds of about `--round-seconds` at the rate just seen (both sides alike), so
            # a purging round spans whole passes of the sweeper, not a slice of one.
            per_round = max(100, round(sizing.rate * args.round_seconds))
            if args.deliveries:
                per_round = max(1, args.deliveries // args.rounds)
            for n in range(args.rounds):
                order = (idle, purging) if n % 2 == 0 else (purging, idle)
                for side in order:
                    busy_before = purger.busy
                    starting = StartsPurging(processes, purger) if side is purging else processes
                    run_round(starting, side, db, identity_id, str(n), per_round, args.concurrency)
                    purger.end()
                    if side is purging:
                        purge_seconds += purger.busy - busy_before
            purger.stop.set()
            purger.thread.join(timeout=30)
            broken = processes.tracebacks()
            if broken:
                raise BenchBroke("a traceback in a log:\n" + "\n".join(broken))
    except BenchBroke as exc:
        print(f"BROKE: {exc}", file=sys.stderr)
        return 1
    from jobs.retention import SHARE_SECONDS

    mode = "continuously" if args.continuous else f"{SHARE_SECONDS:g} s of each 2 s pass"
    print(
        f"purge ({mode}): {purger.messages:,} messages and {purger.deliveries:,} deliveries "
        f"in {purger.busy:.1f} s of purging: {purger.messages / max(purger.busy, 1e-9):,.0f} "
        f"messages/s, {purger.deliveries / max(purger.busy, 1e-9):,.0f} deliveries/s"
    )
    for side in (idle, purging):
        print(
            f"  webhooks, purge {side.name:8} {side.rate:7.1f} deliveries/s   "
            f"p50 {1000 * percentile(side.latencies, 50):6.2f} ms   "
            f"p99 {1000 * percentile(side.latencies, 99):6.2f} ms   ({side.deliveries})"
        )
    print(
        f"  {per_round} deliveries a round; the purge ran {purge_seconds:.1f} s of the "
        f"purging rounds' {purging.wall:.1f} s ({100 * purge_seconds / purging.wall:.0f}%)"
    )
    ratio = purging.rate / idle.rate
    print(f"  webhook rate while purging / idle: {ratio:.2f}x")
    print(goal("ratio >= 0.8x", ratio >= 0.8, f"{0.8 - ratio:.2f}x"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
