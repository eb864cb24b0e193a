"""Webhook rate: signed single-status WhatsApp deliveries through `/webhooks/whatsapp`, against
a floor doing only the durable steps, in one run.

1. Floor: `bench.webhook_floor:app` (commit the raw body; then one guarded UPDATE in its own
   commit) under gunicorn.
2. Ratchet: `wsgi:app` under the same gunicorn settings, each delivery a signed `delivered`
   for a different `sent` message, so every one is applied.
   Both gunicorns run from the start, and the deliveries go in `--rounds` short rounds that
   alternate between the two sides (the machine is shared: a burst of other load then
   hits both alike). Each round is driven by another process on 127.0.0.1 (this script
   with `--drive`), with `--concurrency` connections at once, one request each at a time;
   the bodies and their signatures are built before its clock starts.
3. SQL statements, transactions and connection checkouts per status, counted (not timed)
   over deliveries posted in this process through Flask's test client, with the time each
   took in this process (`--profile` adds cProfile's top functions).

    .venv/bin/python bench/webhook_rate.py [--deliveries 3000] [--rounds 6] [--concurrency 4]
        [--profile]

Uses the database and Redis of bench/common.py (BENCH_DATABASE_URL, BENCH_REDIS_URL).
Exits non-zero only if something broke (a non-2xx, a status not applied, a traceback in a
log); a missed goal is printed as such.
"""

from __future__ import annotations

import argparse
import cProfile
import http.client
import io
import json
import os
import pstats
import socket
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from psycopg.pq import TransactionStatus

from bench.common import (
    SECRET_KEY,
    BenchBroke,
    Processes,
    checkout_pings,
    cpu_delta,
    cpu_snapshot,
    free_port,
    goal,
    header,
    machine_ticks,
    make_app,
    managed,
    percentile,
    print_cpu,
    print_machine,
    process_env,
    reset_services,
    self_cpu,
)

PHONE_NUMBER_ID = "106540352242922"
APP_SECRET = "bench-app-secret"
GOAL_RATIO = 0.7
WARMUP = 100
HISTORY = 20_000  # messages delivered before the run (see `create_history`)
IN_PROCESS = 200
IDLE = TransactionStatus.IDLE


# The driver (a process of its own) ---------------------------------------------------


def drive(port: int, bodies_path: Path, out_path: Path, concurrency: int) -> None:
    """POST every prepared body, `concurrency` at a time; write latencies and codes."""
    bodies = json.loads(bodies_path.read_text())
    prepared = [(b["raw"].encode(), b["signature"]) for b in bodies]
    latencies: list[float] = [0.0] * len(prepared)
    codes: list[int] = [0] * len(prepared)
    next_index = iter(range(len(prepared)))
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                index = next(next_index, None)
            if index is None:
                return
            raw, signature = prepared[index]
            started = time.perf_counter()
            # A new connection per request: gunicorn's sync workers close after each answer.
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            try:
                connection.request(
                    "POST",
                    "/webhooks/whatsapp",
                    body=raw,
                    headers={
                        "Content-Type": "application/json",
                        "X-Hub-Signature-256": signature,
                    },
                )
                response = connection.getresponse()
                response.read()
                codes[index] = response.status
            finally:
                connection.close()
            latencies[index] = time.perf_counter() - started

    threads = [threading.Thread(target=work) for _ in range(concurrency)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    times = os.times()
    out_path.write_text(
        json.dumps(
            {
                "wall": wall,
                "latencies": latencies,
                "codes": codes,
                "cpu": times.user + times.system,
            }
        )
    )


# The world ---------------------------------------------------------------------------


def create_world(db: Any) -> int:
    """A tenant and its WhatsApp identity (signed with APP_SECRET); returns the identity id."""
    from app.clock import utcnow
    from app.crypto import SecretBox
    from app.repo.identities import create_identity
    from app.repo.tenants import create_tenant

    now = utcnow()
    with db.transaction() as session:
        tenant, _ = create_tenant(session, "bench-webhooks", now)
        identity = create_identity(
            session,
            SecretBox(SECRET_KEY),
            tenant_id=tenant.id,
            provider="whatsapp",
            account_id=PHONE_NUMBER_ID,
            base_url="http://127.0.0.1:9/v21.0",
            token="bench-token",
            app_secret=APP_SECRET,
            now=now,
        )
        return int(identity.id)


def create_sent_messages(db: Any, identity_id: int, tag: str, count: int) -> list[str]:
    """`count` messages already `sent` (attempt 1) under provider ids `wamid.<tag>.<n>`."""
    from sqlalchemy import text

    with db.transaction() as session:
        tenant_id = session.execute(
            text("SELECT tenant_id FROM identities WHERE id = :i"), {"i": identity_id}
        ).scalar_one()
        session.execute(
            text(
                """
                INSERT INTO messages (tenant_id, identity_id, recipient, lane, body_text,
                    fingerprint, status, cycle, provider_key_cycle, attempt, unknown_attempts,
                    rate_limited_attempts, had_unknown_outcome, provider_message_id,
                    queued_at, sending_at, sent_at, created_at)
                SELECT :tenant, :identity, '1555' || lpad(n::text, 7, '0'), 'campaign',
                    'bench', md5(:tag || n::text) || md5(n::text), 'sent', 1, 1, 1, 0, 0,
                    false, 'wamid.' || :tag || '.' || n, now(), now(), now(), now()
                FROM generate_series(1, :count) AS n
                """
            ),
            {"tenant": tenant_id, "identity": identity_id, "tag": tag, "count": count},
        )
    return [f"wamid.{tag}.{n}" for n in range(1, count + 1)]


def create_history(db: Any, identity_id: int, count: int) -> None:
    """What an installation that has run a while holds: `count` messages delivered, each
    with its applied status, and the planner's statistics taken over them.

    Against empty tables, PostgreSQL plans the first statements of each connection (kept
    by psycopg once prepared) for a table of one page, with sequential scans, and keeps
    those plans while the rounds grow the tables, until autovacuum's ANALYZE: the rates
    then measure a fresh install's first minute (both sides alike), not the system."""
    from sqlalchemy import text

    wamids = create_sent_messages(db, identity_id, "history", count)
    with db.transaction() as session:
        session.execute(
            text(
                "UPDATE messages SET status = 'delivered', delivered_at = now() "
                "WHERE provider_message_id = ANY(:wamids)"
            ),
            {"wamids": wamids},
        )
        delivery = session.execute(
            text(
                "INSERT INTO webhook_deliveries (provider, identity_id, headers, body, "
                "received_at) VALUES ('whatsapp', :identity, '{}', '{}', now()) RETURNING id"
            ),
            {"identity": identity_id},
        ).scalar_one()
        session.execute(
            text(
                """
                INSERT INTO webhook_statuses (delivery_id, provider, identity_id, routing_id,
                    dedupe_key, provider_message_id, status, received_at, payload, tries,
                    applied_at, result)
                SELECT :delivery, 'whatsapp', :identity, :routing, 'history-' || n,
                    'wamid.history.' || n, 'delivered', now(), '{}'::json, 1, now(), 'applied'
                FROM generate_series(1, :count) AS n
                """
            ),
            {
                "delivery": delivery,
                "identity": identity_id,
                "routing": PHONE_NUMBER_ID,
                "count": count,
            },
        )
    with db.engine.connect() as connection:
        connection.execution_options(isolation_level="AUTOCOMMIT").execute(
            text("VACUUM ANALYZE messages, webhook_statuses, webhook_deliveries")
        )


def signed_bodies(wamids: list[str]) -> list[dict[str, str]]:
    """One signed single-status `delivered` delivery per provider id, shaped like Meta's."""
    import hashlib
    import hmac

    bodies = []
    at = str(int(time.time()))
    for wamid in wamids:
        body = {
            "object": "whatsapp_business_account",
            "entry": [
                {
                    "id": "102290129340398",
                    "changes": [
                        {
                            "field": "messages",
                            "value": {
                                "messaging_product": "whatsapp",
                                "metadata": {
                                    "display_phone_number": "15550783881",
                                    "phone_number_id": PHONE_NUMBER_ID,
                                },
                                "statuses": [
                                    {
                                        "id": wamid,
                                        "status": "delivered",
                                        "timestamp": at,
                                        "recipient_id": "15551234567",
                                        "conversation": {
                                            "id": "6ceb9d929c3a3a6b6a7d2c1c2ba1b3c1",
                                            "origin": {"type": "utility"},
                                        },
                                        "pricing": {
                                            "billable": True,
                                            "pricing_model": "PMP",
                                            "category": "utility",
                                            "type": "regular",
                                        },
                                    }
                                ],
                            },
                        }
                    ],
                }
            ],
        }
        raw = json.dumps(body, separators=(",", ":"))
        digest = hmac.new(APP_SECRET.encode(), raw.encode(), hashlib.sha256).hexdigest()
        bodies.append({"raw": raw, "signature": f"sha256={digest}"})
    return bodies


def count_delivered(db: Any, wamids: list[str]) -> int:
    from sqlalchemy import func, select

    from app.models import Message

    with db.transaction() as session:
        return int(
            session.scalar(
                select(func.count())
                .select_from(Message)
                .where(Message.provider_message_id.in_(wamids), Message.status == "delivered")
            )
            or 0
        )


# The two sides, in alternating rounds ------------------------------------------------


def wait_listening(port: int, process: Any, limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise BenchBroke(f"gunicorn exited with {process.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise BenchBroke(f"gunicorn did not listen on {port} within {limit:.0f} s")


@dataclass
class Side:
    """One gunicorn (the floor or Ratchet) and what its rounds measured."""

    name: str
    wsgi: str
    port: int = 0
    process: Any = None
    deliveries: int = 0
    wall: float = 0.0
    latencies: list[float] = field(default_factory=list)
    cpu: Counter[str] = field(default_factory=Counter)
    self_cpu: float = 0.0
    busy: int = 0
    ticks: int = 0
    round_rates: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.deliveries / self.wall


def start_side(processes: Processes, side: Side, workers: int) -> None:
    side.port = free_port()
    side.process = processes.start(
        side.name,
        [
            sys.executable,
            "-m",
            "gunicorn",
            "--bind",
            f"127.0.0.1:{side.port}",
            "--workers",
            str(workers),
            "--no-control-socket",
            side.wsgi,
        ],
        process_env(),
    )
    wait_listening(side.port, side.process)


def run_round(
    processes: Processes,
    side: Side,
    db: Any,
    identity_id: int,
    tag: str,
    deliveries: int,
    concurrency: int,
    measured: bool = True,
) -> None:
    """Drive `deliveries` fresh `sent` messages to delivered; check every one applied."""
    wamids = create_sent_messages(db, identity_id, f"{side.name}{tag}", deliveries)
    folder = processes.logs
    bodies_path = folder / f"{side.name}-{tag}-bodies.json"
    out_path = folder / f"{side.name}-{tag}-out.json"
    bodies_path.write_text(json.dumps(signed_bodies(wamids)))
    cpu_before = cpu_snapshot({"gunicorn": [side.process.pid]})
    machine_before = machine_ticks()
    self_before = self_cpu()
    driver = processes.start(
        f"{side.name}-driver-{tag}",
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--drive",
            str(side.port),
            "--bodies",
            str(bodies_path),
            "--out",
            str(out_path),
            "--concurrency",
            str(concurrency),
        ],
        process_env(),
    )
    driver.wait()
    cpu_after = cpu_snapshot({"gunicorn": [side.process.pid]})
    machine_after = machine_ticks()
    self_spent = self_cpu() - self_before
    if driver.returncode:
        raise BenchBroke(f"the {side.name} driver exited with {driver.returncode}; see {folder}")
    out = json.loads(out_path.read_text())
    bad = Counter(code for code in out["codes"] if not 200 <= code < 300)
    if bad:
        raise BenchBroke(f"{side.name}: answers other than 2xx: {dict(bad)}; logs in {folder}")
    delivered = count_delivered(db, wamids)
    if delivered != len(wamids):
        raise BenchBroke(f"{side.name}: {delivered} of {len(wamids)} messages moved to delivered")
    if not measured:
        return
    side.deliveries += deliveries
    side.wall += out["wall"]
    side.latencies += out["latencies"]
    side.cpu.update(cpu_delta(cpu_before, cpu_after))
    side.cpu["driver (another process)"] += out["cpu"]  # its own count: it has exited
    side.self_cpu += self_spent
    side.busy += machine_after[0] - machine_before[0]
    side.ticks += machine_after[1] - machine_before[1]
    side.round_rates.append(deliveries / out["wall"])


# Counting, in this process -----------------------------------------------------------


def count_in_process(app: Any, db: Any, identity_id: int, profile: bool) -> dict[str, Any]:
    """Post IN_PROCESS signed deliveries through the test client, counting what they ask;
    then IN_PROCESS more with nothing listening, timed (and profiled with `profile`): a
    listener on the engine sends the hot statements through SQLAlchemy's Connection, not
    the driver (`DriverStatement`), so the counted pass is not the path gunicorn runs."""
    from sqlalchemy import event

    client = app.test_client()

    def post_all(tag: str) -> Counter[str]:
        results: Counter[str] = Counter()
        for body in signed_bodies(create_sent_messages(db, identity_id, tag, IN_PROCESS)):
            response = client.post(
                "/webhooks/whatsapp",
                data=body["raw"],
                headers={
                    "Content-Type": "application/json",
                    "X-Hub-Signature-256": body["signature"],
                },
            )
            if response.status_code != 200:
                raise BenchBroke(f"in-process delivery answered {response.status_code}")
            results.update(response.get_json()["results"])
        if results.get("applied") != IN_PROCESS:
            raise BenchBroke(f"in-process deliveries: {dict(results)}, not {IN_PROCESS} applied")
        return results

    # One delivery first, uncounted: imports, the pool's first connection, statement caches.
    warm = create_sent_messages(db, identity_id, "countwarm", 1)
    for body in signed_bodies(warm):
        client.post(
            "/webhooks/whatsapp",
            data=body["raw"],
            headers={"Content-Type": "application/json", "X-Hub-Signature-256": body["signature"]},
        )

    statements: Counter[str] = Counter()
    transactions: Counter[str] = Counter()

    def idle(conn: Any) -> bool:
        return bool(conn.connection.driver_connection.info.transaction_status == IDLE)

    def on_execute(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements[statement.lstrip().split(None, 1)[0].upper()] += 1
        driver = conn.connection.driver_connection
        # What psycopg sends: a BEGIN before a statement outside a transaction, unless
        # the connection is in autocommit (the statement then commits by itself).
        if idle(conn) and not driver.autocommit:
            transactions["BEGIN"] += 1
        elif idle(conn):
            transactions["autocommit"] += 1

    def on(kind: str) -> Any:
        def listener(conn: Any, *args: Any) -> None:
            if not idle(conn):  # psycopg sends nothing for a connection with no transaction
                transactions[kind] += 1

        return listener

    def on_checkout(*args: Any) -> None:
        transactions["checkout"] += 1

    engine = db.engine
    listeners = [
        (engine, "before_cursor_execute", on_execute),
        (engine, "commit", on("COMMIT")),
        (engine, "rollback", on("ROLLBACK")),
        (engine.pool, "checkout", on_checkout),
    ]
    for target, name, listener in listeners:
        event.listen(target, name, listener)
    pings_before = checkout_pings()
    try:
        post_all("counted")
    finally:
        for target, name, listener in listeners:
            event.remove(target, name, listener)
    transactions["ping"] = int(checkout_pings() - pings_before)

    profiler = cProfile.Profile() if profile else None
    started = time.perf_counter()
    cpu_started = time.process_time()
    if profiler is not None:
        profiler.enable()
    post_all("timed")
    if profiler is not None:
        profiler.disable()
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    top = None
    if profiler is not None:
        buffer = io.StringIO()
        pstats.Stats(profiler, stream=buffer).sort_stats("cumulative").print_stats(30)
        top = buffer.getvalue()
    return {
        "statements": statements,
        "transactions": transactions,
        "elapsed": elapsed,
        "cpu": cpu,
        "profile": top,
    }


# Report ------------------------------------------------------------------------------


def print_side(title: str, side: Side) -> None:
    print(title)
    print(
        f"     {side.rate:7.1f} deliveries/s   wall {side.wall:.2f} s over "
        f"{len(side.round_rates)} rounds (per round: "
        + ", ".join(f"{rate:.0f}" for rate in side.round_rates)
        + ")"
    )
    print(
        f"     latency p50 {1000 * percentile(side.latencies, 50):.2f} ms, "
        f"p99 {1000 * percentile(side.latencies, 99):.2f} ms"
    )
    print_cpu(dict(side.cpu), side.deliveries, side.self_cpu, unit="delivery")
    print_machine((0, 0), (side.busy, side.ticks), sum(side.cpu.values()) + side.self_cpu)
    print(flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deliveries", type=int, default=3000, help="per side (default 3000)")
    parser.add_argument("--rounds", type=int, default=6, help="alternating rounds (default 6)")
    parser.add_argument("--concurrency", type=int, default=4, help="connections at once (4)")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers per side (2)")
    parser.add_argument("--profile", action="store_true", help="cProfile the in-process part")
    parser.add_argument("--drive", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--bodies", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drive:
        drive(args.drive, args.bodies, args.out, args.concurrency)
        return 0

    header("webhook rate: signed WhatsApp deliveries against a two-commit floor")
    reset_services()
    app = make_app()
    try:
        with app.app_context(), managed() as processes:
            from app.db import get_db

            db = get_db()
            identity_id = create_world(db)
            create_history(db, identity_id, HISTORY)
            print(
                f"history: {HISTORY} messages delivered, each with its applied status, and "
                "the statistics taken (VACUUM ANALYZE), before the first round"
            )
            floor = Side("floor", "bench.webhook_floor:app")
            ratchet = Side("ratchet", "wsgi:app")
            for side in (floor, ratchet):
                start_side(processes, side, args.workers)
                run_round(processes, side, db, identity_id, "warm", WARMUP, args.concurrency, False)
            per_round = max(1, args.deliveries // args.rounds)
            for n in range(args.rounds):
                # Alternating which goes first, so a burst of other load hits both alike.
                order = (floor, ratchet) if n % 2 == 0 else (ratchet, floor)
                for side in order:
                    run_round(processes, side, db, identity_id, str(n), per_round, args.concurrency)
            processes.stop(["floor", "ratchet"])
            settings = (
                f"gunicorn --workers {args.workers} (sync), {args.concurrency} connections "
                f"from a driver process, {floor.deliveries} single-status deliveries in "
                f"{args.rounds} rounds alternating with the other side's"
            )
            print_side(
                f"[1] floor: bench/webhook_floor.py (commit the raw body; one guarded UPDATE in "
                f"its own commit), {settings}",
                floor,
            )
            print_side(
                f"[2] Ratchet: POST /webhooks/whatsapp (signed, every status applied), {settings}",
                ratchet,
            )
            counted = count_in_process(app, db, identity_id, args.profile)
            broken = processes.tracebacks()
            if broken:
                raise BenchBroke("a traceback in a log:\n" + "\n".join(broken))
    except BenchBroke as exc:
        print(f"BROKE: {exc}", file=sys.stderr)
        return 1

    statements = counted["statements"]
    transactions = counted["transactions"]
    per = IN_PROCESS
    print(f"[3] per status, counted over {per} deliveries in this process (Flask test client)")
    total = sum(statements.values())
    by_kind = ", ".join(f"{k} {v / per:.1f}" for k, v in sorted(statements.items()))
    print(f"     SQL statements: {total / per:.1f} per status ({by_kind})")
    print(
        f"     round trips besides the statements: {transactions['BEGIN'] / per:.1f} BEGIN, "
        f"{transactions['COMMIT'] / per:.1f} COMMIT, {transactions['ROLLBACK'] / per:.1f} "
        f"ROLLBACK, {transactions['checkout'] / per:.1f} pool checkouts and "
        f"{transactions['ping'] / per:.2f} pings at checkout per status; "
        f"{transactions['autocommit'] / per:.1f} statements committed by themselves "
        "(autocommit)"
    )
    print(
        "     floor: 2 SQL statements, 2 BEGIN and 2 COMMIT per status, by construction "
        "(psycopg's transaction blocks)"
    )
    print(
        f"     time per status in this process: {1000 * counted['elapsed'] / per:.2f} ms wall, "
        f"{1000 * counted['cpu'] / per:.2f} ms CPU (Python, with the test client's share; "
        f"{per} more deliveries, with nothing listening to the engine)"
    )
    if counted["profile"]:
        print(counted["profile"])
    print()
    ratio = ratchet.rate / floor.rate
    rounds = sorted(r / f for r, f in zip(ratchet.round_rates, floor.round_rates, strict=True))
    print(
        f"ratio: Ratchet {ratchet.rate:.1f} / floor {floor.rate:.1f} deliveries/s = "
        f"{ratio:.2f}x   (per round {', '.join(f'{r:.2f}' for r in rounds)}; "
        f"p50 {1000 * percentile(ratchet.latencies, 50):.2f} vs "
        f"{1000 * percentile(floor.latencies, 50):.2f} ms, "
        f"p99 {1000 * percentile(ratchet.latencies, 99):.2f} vs "
        f"{1000 * percentile(floor.latencies, 99):.2f} ms)"
    )
    print(goal(f">= {GOAL_RATIO}x the floor", ratio >= GOAL_RATIO, f"{GOAL_RATIO - ratio:.2f}x"))
    print("(one run, both sides alternating on a shared machine: see the machine lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
