"""How the dashboard's pages grow with the messages table: 10k, 100k and 1M messages.

Fills its own PostgreSQL database (`bench_pages`, created if missing) in SQL, one schema
per size (`size_10000`, ...; the smaller ones are exactly the newest rows of the larger),
with a realistic spread: 20 tenants, 60 identities (one busy number with a third of the
traffic), both lanes; states mostly read
and delivered, 5% failed (50,000 dead letters at 1M) across the provider's error codes and
our classes; one attempt and two events per message; a webhook status for each delivered
or read one. History grows backwards at one message every 0.9 s: a bigger table is a longer
history, not a busier hour, so the last hour and the backlog (queued and sending messages,
all in the newest rows) are the same at every size, as they are on a real system.

Each page is asked 20 times through the app in-process (the server's own time: routing,
queries, templates; no network) as a platform admin who sees every tenant, the sizes taking
turns request by request (so a slow spell of the shared machine falls on all of them), and
the median is printed, with the EXPLAIN (ANALYZE) plan of each page's slowest statement at 1M.
Goal: at 1M at most 2x the 10k time, and under 150 ms, for every page.

    .venv/bin/python bench/pages.py [--sizes 10000,100000,1000000] [--no-plans]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sqlalchemy import event, text  # noqa: E402

from bench.common import ensure_database  # noqa: E402
from bench.page_urls import pages  # noqa: E402

# Its own database (it fills three schemas of it), and Redis db 9 like the other benches;
# BENCH_PAGES_DATABASE / BENCH_REDIS_URL point a run elsewhere.
DATABASE = os.environ.get("BENCH_PAGES_DATABASE", "bench_pages")
PG_URL = f"postgresql+psycopg://127.0.0.1:5432/{DATABASE}"
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/9")
SECRET_KEY = "bench-secret-key-not-for-production"
NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
SPACING_S = 0.9  # one message every 0.9 s, going back in time
TOP = 1_000_000  # ids run 1..TOP; the newest messages have the highest ids
TENANTS, IDENTITIES_PER_TENANT = 20, 3
ROUNDS = 20
PASSWORD = "bench password not secret"

# (failure class, provider code, share of the failures); ranks come from the real table.
FAILURES = [
    ("exhausted", 131000, 20),
    ("needs_human", 132001, 15),
    ("needs_human", 132015, 5),
    ("needs_human", 999999, 2),
    ("permanent", 131026, 25),
    ("permanent", 131047, 18),
    ("permanent", 131050, 10),
    ("canceled", None, 5),
]


def schema_url(size: int) -> str:
    """Each size lives in its own schema of the one database, side by side."""
    return f"{PG_URL}?options=-csearch_path=size_{size}"


def reset_schema(size: int) -> None:
    from alembic import command

    from app import migrate
    from app.db import build_engine

    engine = build_engine(PG_URL)
    with engine.begin() as connection:
        connection.execute(text("DROP SCHEMA IF EXISTS public CASCADE"))
        connection.execute(text("CREATE SCHEMA public"))
        connection.execute(text(f"DROP SCHEMA IF EXISTS size_{size} CASCADE"))
        connection.execute(text(f"CREATE SCHEMA size_{size}"))
    with engine.connect() as connection:
        # Migrated inside that schema (Alembic's own URL cannot carry the option), for
        # the whole session: the migrations commit one by one. The connection is thrown
        # away after (the engine is disposed).
        connection.execute(text(f"SET search_path TO size_{size}"))
        connection.commit()
        config = migrate.alembic_config(PG_URL)
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
    engine.dispose()


def seed_identities(engine: Any) -> None:
    from app.crypto import SecretBox, hash_password

    box = SecretBox(SECRET_KEY)
    token = box.encrypt("bench-token-value")
    with engine.begin() as connection:
        for t in range(1, TENANTS + 1):
            connection.execute(
                text(
                    "INSERT INTO tenants (id, name, api_key_prefix, api_key_hash, created_at) "
                    "VALUES (:id, :name, :prefix, :hash, :at)"
                ),
                {
                    "id": t,
                    "name": f"tenant-{t:02d}",
                    "prefix": f"rk_{t}",
                    "hash": "0" * 64,
                    "at": NOW - timedelta(days=400),
                },
            )
            for k in range(IDENTITIES_PER_TENANT):
                ident = (t - 1) * IDENTITIES_PER_TENANT + k + 1
                connection.execute(
                    text(
                        "INSERT INTO identities (id, tenant_id, provider, account_id, base_url, "
                        "token_encrypted, reply_rate, campaign_rate, total_rate, "
                        "credentials_version, created_at, token_set_at) VALUES (:id, :t, "
                        "'whatsapp', :acct, 'http://127.0.0.1:9', :tok, 20, 10, 80, 0, :at, :at)"
                    ),
                    {
                        "id": ident,
                        "t": t,
                        "acct": f"10{ident:08d}",
                        "tok": token,
                        "at": NOW - timedelta(days=400),
                    },
                )
        connection.execute(text("SELECT setval('tenants_id_seq', :n)"), {"n": TENANTS})
        connection.execute(
            text("SELECT setval('identities_id_seq', :n)"), {"n": TENANTS * IDENTITIES_PER_TENANT}
        )
        connection.execute(
            text(
                "INSERT INTO staff (email, role, tenant_id, password_hash, created_at) "
                "VALUES ('bench@ratchet.test', 'admin', NULL, :hash, :at)"
            ),
            {"hash": hash_password(PASSWORD), "at": NOW},
        )
        # A few open windows per identity, for the identities page.
        connection.execute(
            text(
                "INSERT INTO conversation_windows (identity_id, recipient, last_inbound_at, "
                "open_until) SELECT i, '1555' || lpad((i * 1000 + w)::text, 7, '0'), "
                ":now - interval '1 hour', :now + interval '23 hours' "
                "FROM generate_series(1, :n) i, generate_series(1, 40) w"
            ),
            {"now": NOW, "n": TENANTS * IDENTITIES_PER_TENANT},
        )
        connection.execute(
            text(
                "INSERT INTO webhook_deliveries (id, provider, headers, body, received_at) "
                "VALUES (1, 'whatsapp', '{}', '{}', :now)"
            ),
            {"now": NOW},
        )


def failure_table() -> str:
    """VALUES rows (slot, class, code, rank): slot picks a failure by its share."""
    from app.providers.dead_letter_order import rank_of

    rows, slot = [], 0
    for failure_class, code, share in FAILURES:
        rank = rank_of("whatsapp", failure_class, code)
        for _ in range(share):
            rows.append(f"({slot}, '{failure_class}', {'NULL' if code is None else code}, {rank})")
            slot += 1
    return ", ".join(rows)


def fill(engine: Any, low: int, high: int) -> None:
    """Messages with ids low..high (the older history of what is there), then their
    attempts, events and webhook statuses, all in SQL."""
    identities = TENANTS * IDENTITIES_PER_TENANT
    failures = failure_table()
    with engine.begin() as connection:
        connection.execute(text("SET LOCAL synchronous_commit = off"))
        connection.execute(
            text(
                f"""
WITH base AS (
  SELECT g AS id,
         (hashint4(g) & 2147483647) % 1000 AS r,
         -- One busy number (a third of the traffic), the rest spread evenly.
         CASE WHEN (hashint4(g * 5) & 2147483647) % 3 = 0 THEN 1
              ELSE 1 + (hashint4(g * 7) & 2147483647) % {identities} END AS identity_id,
         :now - make_interval(secs => ({TOP} - g) * {SPACING_S}) AS at
  FROM generate_series(:low, :high) g
), shaped AS (
  SELECT b.*, ((b.identity_id - 1) / {IDENTITIES_PER_TENANT}) + 1 AS tenant_id,
         CASE WHEN b.id > {TOP} - 4000 AND b.r < 30 THEN 'queued'
              WHEN b.id > {TOP} - 4000 AND b.r < 45 THEN 'sending'
              WHEN b.r < 50 THEN 'failed'
              WHEN b.r < 215 THEN 'sent'
              WHEN b.r < 415 THEN 'delivered'
              ELSE 'read' END AS status,
         CASE WHEN b.r % 4 = 0 THEN 'reply' ELSE 'campaign' END AS lane
  FROM base b
), failing AS (
  SELECT s.*, f.class AS failure_class, f.code, f.rank
  FROM shaped s
  LEFT JOIN (VALUES {failures}) AS f(slot, class, code, rank)
    ON s.status = 'failed' AND f.slot = (hashint4(s.id * 13) & 2147483647) % 100
)
INSERT INTO messages (
  id, tenant_id, identity_id, recipient, lane, body_text, idempotency_key, fingerprint,
  status, cycle, provider_key_cycle, correlation_id, provider_message_id, attempt,
  unknown_attempts, rate_limited_attempts, had_unknown_outcome, request_started_ms,
  last_attempt_at, next_attempt_at, lease_until, failure_class, dead_letter_rank, last_error,
  queued_at, sending_at, sent_at, delivered_at, read_at, failed_at, created_at)
SELECT id, tenant_id, identity_id,
  '1555' || lpad(((hashint4(id * 3) & 2147483647) % 10000000)::text, 7, '0'),
  lane, 'Your order ' || id || ' is on its way', 'order-' || id, repeat('f', 64),
  status, 1, 1, 'c1.' || id,
  CASE WHEN status IN ('sent', 'delivered', 'read') THEN 'wamid.HBg' || md5(id::text) END,
  CASE WHEN status = 'queued' THEN 0 ELSE 1 END, 0, 0, false,
  CASE WHEN status <> 'queued' THEN (extract(epoch FROM at) * 1000)::bigint END,
  CASE WHEN status <> 'queued' THEN at END,
  CASE WHEN status = 'sending' AND r % 3 = 0 THEN at + interval '30 seconds' END,
  CASE WHEN status = 'sending' AND r % 3 = 1 THEN at + interval '25 seconds' END,
  failure_class, rank,
  CASE WHEN status = 'failed' THEN json_build_object(
    'provider', 'whatsapp', 'http_status', 400, 'code', code,
    'title', 'Error ' || coalesce(code::text, 'canceled'), 'message', 'verbatim words',
    'trace_id', substr(md5(id::text), 1, 12)) END,
  at, CASE WHEN status <> 'queued' THEN at END,
  CASE WHEN status IN ('sent', 'delivered', 'read') THEN at + interval '1 second' END,
  CASE WHEN status IN ('delivered', 'read') THEN at + interval '3 seconds' END,
  CASE WHEN status = 'read' THEN at + interval '60 seconds' END,
  CASE WHEN status = 'failed' THEN at + interval '1 second' END,
  at
FROM failing
"""
            ),
            {"now": NOW, "low": low, "high": high},
        )
        connection.execute(
            text(
                """
INSERT INTO attempts (message_id, cycle, number, provider_key, started_at, finished_at,
  outcome, http_status, provider_message_id, response_body)
SELECT id, 1, 1, md5(id::text), last_attempt_at, last_attempt_at + interval '200 ms',
  CASE WHEN status = 'failed' THEN coalesce(failure_class, 'permanent')
       WHEN status = 'sending' THEN NULL ELSE 'accepted' END,
  CASE WHEN status = 'failed' THEN 400 WHEN status = 'sending' THEN NULL ELSE 200 END,
  provider_message_id, '{"messages":[{"id":"wamid"}]}'
FROM messages WHERE id BETWEEN :low AND :high AND status <> 'queued'
"""
            ),
            {"low": low, "high": high},
        )
        connection.execute(
            text(
                """
INSERT INTO message_events (message_id, cycle, source, kind, from_status, to_status,
  applied, received_at, detail)
SELECT id, 1, 'api', 'create', NULL, 'queued', true, created_at, NULL::json
FROM messages WHERE id BETWEEN :low AND :high
UNION ALL
SELECT id, 1, 'worker', 'claim', 'queued', 'sending', true, sending_at, '{"attempt": 1}'::json
FROM messages WHERE id BETWEEN :low AND :high AND sending_at IS NOT NULL
"""
            ),
            {"low": low, "high": high},
        )
        connection.execute(
            text(
                """
INSERT INTO webhook_statuses (delivery_id, provider, identity_id, routing_id, dedupe_key,
  provider_message_id, status, provider_time, received_at, payload, applied_at, result,
  message_id, tries)
SELECT 1, 'whatsapp', identity_id, 'r', 'whatsapp:' || provider_message_id || '\\:delivered',
  provider_message_id, 'delivered', delivered_at, delivered_at, '{}', delivered_at, 'applied',
  id, 1
FROM messages WHERE id BETWEEN :low AND :high AND delivered_at IS NOT NULL
"""
            ),
            {"low": low, "high": high},
        )
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(text("SELECT setval('messages_id_seq', :top)"), {"top": TOP})
        connection.execute(text("VACUUM ANALYZE"))


@dataclass
class Statements:
    """The statements one request ran, with their parameters and times."""

    seen: list[tuple[float, str, Any]] = field(default_factory=list)
    _start: float = 0.0


@contextmanager
def recording(engine: Any) -> Iterator[Statements]:
    found = Statements()

    def before(conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool):
        found._start = time.perf_counter()

    def after(conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: bool):
        found.seen.append((time.perf_counter() - found._start, statement, params))

    event.listen(engine, "before_cursor_execute", before)
    event.listen(engine, "after_cursor_execute", after)
    try:
        yield found
    finally:
        event.remove(engine, "before_cursor_execute", before)
        event.remove(engine, "after_cursor_execute", after)


def explain(engine: Any, statement: str, params: Any) -> str:
    with engine.connect() as connection:
        cursor = connection.connection.driver_connection.cursor()
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + statement, params)
        plan = "\n".join("      " + row[0] for row in cursor.fetchall())
        cursor.close()
        connection.rollback()
    return plan


def fold_charts_until_done(app: Any) -> int:
    """Sweeper passes of the charts' fold at `NOW` until nothing is left; the passes made.
    Then the rollup's statistics, as autovacuum keeps them on a running system (without
    them the planner takes the new table for empty and sorts where it would hash)."""
    from app.repo.chart_rollup import fold_charts

    database = app.extensions["ratchet.db"]
    passes = 0
    while True:
        passes += 1
        with database.transaction() as session:
            if fold_charts(session, NOW).new == 0:
                break
    with database.engine.begin() as connection:
        connection.execute(text("ANALYZE chart_rollups, chart_fold_marks"))
    return passes


def signed_in_client(app: Any) -> Any:
    import re

    client = app.test_client()
    page = client.get("/sign-in").get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page)
    if token is None:
        raise RuntimeError(f"no sign-in form: {page[:300]}")
    assert token is not None
    answer = client.post(
        "/sign-in",
        data={"email": "bench@ratchet.test", "password": PASSWORD, "csrf_token": token.group(1)},
    )
    assert answer.status_code == 302, answer.status_code
    return client


def timed(client: Any, url: str) -> float:
    start = time.perf_counter()
    answer = client.get(url)
    took = time.perf_counter() - start
    if answer.status_code not in (200, 302):
        raise RuntimeError(f"{url}: HTTP {answer.status_code}")
    return took * 1000


def measure(apps: dict[int, Any], urls: dict[int, dict[str, str]]) -> dict[int, dict[str, float]]:
    """Every page of every size, interleaved round by round: a slow spell of the shared
    machine then falls on every size alike instead of on whichever ran at that moment."""
    clients = {size: signed_in_client(app) for size, app in apps.items()}
    for size, client in clients.items():
        for url in urls[size].values():
            client.get(url)  # warm: the plan cache, the templates
    times: dict[int, dict[str, list[float]]] = {
        size: {name: [] for name in urls[size]} for size in apps
    }
    for _ in range(ROUNDS):
        for name in urls[next(iter(apps))]:
            for size, client in clients.items():
                times[size][name].append(timed(client, urls[size][name]))
    return {
        size: {name: statistics.median(found) for name, found in pages_.items()}
        for size, pages_ in times.items()
    }


def plans(app: Any, urls: dict[str, str]) -> list[str]:
    engine = app.extensions["ratchet.db"].engine
    client = signed_in_client(app)
    notes = []
    for name, url in urls.items():
        with recording(engine) as found:
            client.get(url)
        slowest = max(found.seen, key=lambda seen: seen[0])
        notes.append(
            f"  [{name}] {url}: slowest of {len(found.seen)} statements "
            f"({slowest[0] * 1000:.1f} ms):\n      "
            + " ".join(slowest[1].split())[:400]
            + "\n"
            + explain(engine, slowest[1], slowest[2])
        )
    return notes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--no-plans", action="store_true")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print("== bench/pages.py: the dashboard's server time at 10k, 100k and 1M messages")
    print(f"machine: nproc {os.cpu_count()}, {platform.python_version()}, shared with other work")
    print(f"date:    {datetime.now(UTC).isoformat(timespec='seconds')}")
    print(f"database: {PG_URL}, one schema per size (recreated); clock at {NOW.isoformat()}")
    ensure_database(PG_URL)
    from app import create_app

    apps: dict[int, Any] = {}
    urls: dict[int, dict[str, str]] = {}
    for size in sizes:
        started = time.perf_counter()
        reset_schema(size)
        app = create_app(
            {"database_url": schema_url(size), "redis_url": REDIS_URL, "secret_key": SECRET_KEY}
        )
        app.extensions["ratchet.clock"] = lambda: NOW
        engine = app.extensions["ratchet.db"].engine
        seed_identities(engine)
        fill(engine, TOP - size + 1, TOP)
        with engine.connect() as connection:
            counts = dict(
                connection.execute(
                    text("SELECT status, count(*) FROM messages GROUP BY status")
                ).all()
            )
        print(
            f"filled schema size_{size} with {size:,} messages in "
            f"{time.perf_counter() - started:.1f} s: "
            + ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items())),
            flush=True,
        )
        # The charts' rollup as a running sweeper keeps it: the window folded to `NOW`.
        folding = time.perf_counter()
        passes = fold_charts_until_done(app)
        print(
            f"  folded the charts' week into their rollup in {passes} sweeper passes, "
            f"{time.perf_counter() - folding:.1f} s",
            flush=True,
        )
        apps[size] = app
        urls[size] = pages(engine)
    # No app context held around the requests: each request gets its own (and its own `g`).
    results = measure(apps, urls)
    notes = [] if args.no_plans else plans(apps[sizes[-1]], urls[sizes[-1]])
    for app in apps.values():
        app.extensions["ratchet.db"].dispose()
        app.extensions["ratchet.redis"].close()
    print()
    print(f"server time, median of {ROUNDS} (ms):")
    first, last = sizes[0], sizes[-1]
    print(
        f"  {'page':<30}"
        + "".join(f"{f'{s:,}':>11}" for s in sizes)
        + f"{f'{last // 1000}k/{first // 1000}k':>10}  goal (<=2x, <150 ms)"
    )
    missed = 0
    for name in results[first]:
        ratio = results[last][name] / results[first][name]
        ok = ratio <= 2 and results[last][name] < 150
        missed += not ok
        print(
            f"  {name:<30}"
            + "".join(f"{results[s][name]:>11.1f}" for s in sizes)
            + f"{ratio:>9.2f}x  {'met' if ok else 'MISSED'}"
        )
    if notes:
        print()
        print(f"EXPLAIN (ANALYZE) of each page's slowest statement at {last:,}:")
        print("\n".join(notes))
    print()
    print(
        "The machine is shared (2 cores, other sessions running): absolute times vary "
        "from run to run; the ratios are the measure."
    )
    print(f"goal: {'met for every page' if not missed else f'missed on {missed} pages'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
