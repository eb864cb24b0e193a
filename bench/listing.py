"""How `GET /v1/messages` grows with the messages table: 10k, 100k and 1M messages.

The same data as `bench/pages.py` (its schemas, filled the same way: 20 tenants, 60
identities, 5% failed, a history growing backwards), in the database that bench uses
(`BENCH_PAGES_DATABASE`, default `bench_pages`; its schemas are recreated). Tenant 1 gets a
known API key. Each query (no filter, and each filter alone, and the fifth page through the
cursors) is asked 20 times through the app in-process (the server's time: routing, the key
check, the query, JSON; no network), the sizes taking turns request by request; the median
is printed, and the ratio of the 1M time to the 10k time. Goal: at most 2x for every query.

    .venv/bin/python bench/listing.py [--sizes 10000,100000,1000000]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sqlalchemy import text  # noqa: E402

from bench.common import ensure_database  # noqa: E402
from bench.pages import (  # noqa: E402
    NOW,
    PG_URL,
    REDIS_URL,
    SECRET_KEY,
    TOP,
    fill,
    reset_schema,
    schema_url,
    seed_identities,
)

ROUNDS = 20
SECRET = "bench-listing-secret"
KEY = f"rk_1.{SECRET}"


def queries(engine: Any) -> dict[str, dict[str, str]]:
    """Each query's parameters, with a recipient of tenant 1 from the data."""
    with engine.connect() as connection:
        connection.execute(
            text("UPDATE tenants SET api_key_hash = :hash WHERE id = 1"),
            {"hash": hashlib.sha256(SECRET.encode()).hexdigest()},
        )
        connection.commit()
        recipient = connection.execute(
            text("SELECT recipient FROM messages WHERE tenant_id = 1 ORDER BY id DESC LIMIT 1")
        ).scalar_one()
    hour_ago = (NOW - timedelta(hours=1)).isoformat()
    return {
        "no filter": {},
        "status=failed": {"status": "failed"},
        "failure_class=permanent": {"failure_class": "permanent"},
        "identity_id=1": {"identity_id": "1"},
        "lane=reply": {"lane": "reply"},
        "to=<a recipient>": {"to": recipient},
        "created_since=1h ago": {"created_since": hour_ago},
        "updated_since=1h ago": {"updated_since": hour_ago},
    }


def timed(client: Any, query: dict[str, str]) -> float:
    headers = {"Authorization": f"Bearer {KEY}"}
    start = time.perf_counter()
    answer = client.get(f"/v1/messages?{urlencode(query)}", headers=headers)
    took = time.perf_counter() - start
    if answer.status_code != 200:
        raise RuntimeError(f"{query}: HTTP {answer.status_code} {answer.get_data(as_text=True)}")
    return took * 1000


def fifth_page(client: Any) -> dict[str, str]:
    """The cursor of the fifth page of the unfiltered list (50 a page)."""
    cursor: dict[str, str] = {}
    for _ in range(4):
        answer = client.get(
            f"/v1/messages?{urlencode(cursor)}", headers={"Authorization": f"Bearer {KEY}"}
        ).get_json()
        cursor = {"cursor": answer["next_cursor"]}
    return cursor


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print("== bench/listing.py: GET /v1/messages, server time at growing table sizes")
    print(f"machine: nproc {os.cpu_count()}, {platform.python_version()}, shared with other work")
    print(f"date:    {datetime.now(UTC).isoformat(timespec='seconds')}")
    print(f"database: {PG_URL}, one schema per size (recreated), tenant 1's key known")
    ensure_database(PG_URL)
    from app import create_app

    apps: dict[int, Any] = {}
    asked: dict[int, dict[str, dict[str, str]]] = {}
    for size in sizes:
        started = time.perf_counter()
        reset_schema(size)
        app = create_app(
            {"database_url": schema_url(size), "redis_url": REDIS_URL, "secret_key": SECRET_KEY}
        )
        engine = app.extensions["ratchet.db"].engine
        seed_identities(engine)
        fill(engine, TOP - size + 1, TOP)
        with engine.connect() as connection:
            connection.execute(text("ANALYZE"))
            connection.commit()
            mine = connection.execute(
                text("SELECT count(*) FROM messages WHERE tenant_id = 1")
            ).scalar_one()
        print(
            f"filled schema size_{size} with {size:,} messages ({mine:,} of tenant 1) in "
            f"{time.perf_counter() - started:.1f} s",
            flush=True,
        )
        apps[size] = app
        asked[size] = queries(engine)
        asked[size]["fifth page (cursor)"] = fifth_page(app.test_client())
    clients = {size: app.test_client() for size, app in apps.items()}
    for size, client in clients.items():
        for query in asked[size].values():
            timed(client, query)  # warm
    times: dict[int, dict[str, list[float]]] = {s: {n: [] for n in asked[s]} for s in sizes}
    for _ in range(ROUNDS):
        for name in asked[sizes[0]]:
            for size, client in clients.items():
                times[size][name].append(timed(client, asked[size][name]))
    for app in apps.values():
        app.extensions["ratchet.db"].dispose()
        app.extensions["ratchet.redis"].close()
    first, last = sizes[0], sizes[-1]
    print()
    print(f"server time, median of {ROUNDS} (ms), 50 a page:")
    print(f"  {'query':28}" + "".join(f"{size:>12,}" for size in sizes) + f"{'ratio':>9}")
    worst = 0.0
    for name in asked[first]:
        medians = [statistics.median(times[size][name]) for size in sizes]
        ratio = medians[-1] / medians[0]
        worst = max(worst, ratio)
        print(f"  {name:28}" + "".join(f"{m:12.1f}" for m in medians) + f"{ratio:8.2f}x")
    print(
        f"goal {last:,} / {first:,} <= 2x for every query: "
        + ("met" if worst <= 2 else f"missed (worst {worst:.2f}x)")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
