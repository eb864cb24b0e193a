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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sqlalchemy import event, text  # noqa: E402

from bench.common import ensure_database  # noqa: E402
from bench.page_fill import NOW, PASSWORD, SECRET_KEY, TOP, fill, seed_identities  # noqa: E402
from bench.page_urls import pages  # noqa: E402

# Its own database (it fills three schemas of it), and Redis db 9 like the other benches;
# BENCH_PAGES_DATABASE / BENCH_REDIS_URL point a run elsewhere.
DATABASE = os.environ.get("BENCH_PAGES_DATABASE", "bench_pages")
PG_URL = f"postgresql+psycopg://127.0.0.1:5432/{DATABASE}"
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/9")
ROUNDS = 20


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
