"""One tenant floods the API; does another tenant's latency hold? (issue 34, intake limits)

Two tenants, each with one WhatsApp identity (no workers run: what is measured is the
API's answer, not the send). Tenant A is limited to `--limit` requests a second; tenant B
has no limit. gunicorn serves the app (2 sync workers, as `make run`). B posts a message
every 1/`--quiet-rate` s from this process and times each answer; A's flood (`--flood`
requests a second offered, from `--connections` connections in a driver process) runs in
every other round. Rounds alternate idle, flood, flood, idle, ... so a slow spell of the
shared machine falls on both. Printed: B's p50 / p99 idle and under the flood, A's
answers (201 / 429), and the ratio of B's p99 under the flood to its idle p99.
Goal: <= 1.5x.

With `--no-limit` A is not limited: its flood is stored (the cost the limit avoids).

    .venv/bin/python bench/intake_flood.py [--rounds 8] [--seconds 8] [--flood 200] [--limit 10]
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    BenchBroke,
    Processes,
    free_port,
    goal,
    header,
    make_app,
    managed,
    percentile,
    process_env,
    reset_services,
)
from bench.webhook_rate import wait_listening  # noqa: E402


def post(port: int, key: str, identity_id: int, idempotency_key: str) -> tuple[int, float]:
    """One POST /v1/messages on a new connection: (status, seconds)."""
    body = json.dumps({"identity_id": identity_id, "to": "+15551234567", "text": "hi"})
    started = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request(
            "POST",
            "/v1/messages",
            body=body,
            headers={
                "Content-Type": "application/json",
                "Authorization": f"Bearer {key}",
                "Idempotency-Key": idempotency_key,
            },
        )
        response = connection.getresponse()
        response.read()
        return response.status, time.perf_counter() - started
    finally:
        connection.close()


def flood(port: int, key: str, identity_id: int, rate: float, seconds: float, out: Path) -> None:
    """Offer `rate` requests a second for `seconds` from 8 connections; write the codes."""
    codes: dict[str, int] = {}
    lock = threading.Lock()
    threads = 8
    interval = threads / rate
    stop_at = time.monotonic() + seconds

    def work(n: int) -> None:
        due = time.monotonic() + n * interval / threads
        sent = 0
        while True:
            now = time.monotonic()
            if now >= stop_at:
                return
            if due > now:
                time.sleep(due - now)
            status, _ = post(port, key, identity_id, f"flood-{out.stem}-{n}-{sent}")
            sent += 1
            due += interval
            with lock:
                codes[str(status)] = codes.get(str(status), 0) + 1

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    out.write_text(json.dumps(codes))


def create_world(app: Any, limit: float | None) -> dict[str, Any]:
    from app.clock import utcnow
    from app.crypto import SecretBox
    from app.db import get_db
    from app.repo.identities import create_identity
    from app.repo.tenant_settings import TenantSettings, set_tenant_settings
    from app.repo.tenants import create_tenant
    from bench.common import SECRET_KEY

    world: dict[str, Any] = {}
    with app.app_context(), get_db().transaction() as session:
        for n, name in enumerate(("flooder", "quiet")):
            tenant, key = create_tenant(session, name, utcnow())
            identity = create_identity(
                session,
                SecretBox(SECRET_KEY),
                tenant_id=tenant.id,
                provider="whatsapp",
                account_id=f"90000{n}",
                base_url="http://127.0.0.1:9",
                token=f"token-{name}-1234567890",
                app_secret=f"secret-{name}",
                verify_token=f"verify-{name}",
                now=utcnow(),
            )
            world[name] = (key, identity.id)
            if name == "flooder" and limit is not None:
                settings = TenantSettings(limit, None, 30)
                set_tenant_settings(session, tenant.id, settings, actor="bench", now=utcnow())
    return world


def quiet_round(port: int, key: str, identity_id: int, rate: float, seconds: float, tag: str):
    """B's requests at `rate` a second for `seconds`: their latencies (s)."""
    latencies = []
    due = time.monotonic()
    stop_at = due + seconds
    n = 0
    while due < stop_at:
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        status, took = post(port, key, identity_id, f"quiet-{tag}-{n}")
        if status != 201:
            raise BenchBroke(f"tenant B's request answered {status}")
        latencies.append(took)
        n += 1
        due += 1 / rate
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8, help="alternating rounds (8)")
    parser.add_argument("--seconds", type=float, default=8.0, help="per round (8)")
    parser.add_argument("--flood", type=float, default=200.0, help="A's offered req/s (200)")
    parser.add_argument("--limit", type=float, default=10.0, help="A's limit, req/s (10)")
    parser.add_argument("--no-limit", action="store_true", help="A unlimited")
    parser.add_argument("--quiet-rate", type=float, default=10.0, help="B's req/s (10)")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers (2)")
    parser.add_argument(
        "--threads", type=int, default=1, help="threads per worker (1: sync; more: gthread)"
    )
    parser.add_argument("--drive", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--key", help=argparse.SUPPRESS)
    parser.add_argument("--identity", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drive:
        flood(args.drive, args.key, args.identity, args.flood, args.seconds, args.out)
        return 0

    header("intake limits: one tenant floods, another's latency")
    reset_services()
    limit = None if args.no_limit else args.limit
    app = make_app()
    world = create_world(app, limit)
    idle: list[float] = []
    flooded: list[float] = []
    codes: dict[str, int] = {}
    try:
        with managed() as processes:
            port = start_web(processes, args.workers, args.threads)
            b_key, b_identity = world["quiet"]
            a_key, a_identity = world["flooder"]
            quiet_round(port, b_key, b_identity, args.quiet_rate, 1.0, "warm")
            for n in range(args.rounds):
                flooding = n % 4 in (1, 2)  # idle, flood, flood, idle, idle, flood, ...
                driver = None
                out = processes.logs / f"flood-{n}.json"
                if flooding:
                    driver = processes.start(
                        f"flood-{n}",
                        [
                            sys.executable,
                            str(Path(__file__)),
                            "--drive",
                            str(port),
                            "--key",
                            a_key,
                            "--identity",
                            str(a_identity),
                            "--flood",
                            str(args.flood),
                            "--seconds",
                            str(args.seconds + 1),
                            "--out",
                            str(out),
                        ],
                        process_env(),
                    )
                    time.sleep(0.5)  # the flood under way before B's round starts
                took = quiet_round(port, b_key, b_identity, args.quiet_rate, args.seconds, str(n))
                (flooded if flooding else idle).extend(took)
                if driver is not None:
                    driver.wait(timeout=120)
                    for code, count in json.loads(out.read_text()).items():
                        codes[code] = codes.get(code, 0) + count
            broken = processes.tracebacks()
            if broken:
                raise BenchBroke("a traceback in a log:\n" + "\n".join(broken))
    except BenchBroke as exc:
        print(f"BROKE: {exc}", file=sys.stderr)
        return 1

    flood_seconds = (args.rounds // 2) * (args.seconds + 1)
    print(
        f"tenant A: {'no limit' if limit is None else f'limited to {limit:g} requests/s'}, "
        f"offered {args.flood:g} POST /v1/messages a second in {args.rounds // 2} of "
        f"{args.rounds} rounds; answers {dict(sorted(codes.items()))} "
        f"({sum(codes.values()) / flood_seconds:.0f} answered a second)"
    )
    shape = f"gthread x {args.threads}" if args.threads > 1 else "sync"
    print(
        f"tenant B: {args.quiet_rate:g} POST /v1/messages a second, gunicorn {args.workers} {shape}"
    )
    for label, values in (("idle", idle), ("A flooding", flooded)):
        print(
            f"  {label:11} p50 {1000 * percentile(values, 50):7.1f} ms   "
            f"p99 {1000 * percentile(values, 99):7.1f} ms   ({len(values)} requests)"
        )
    ratio = percentile(flooded, 99) / percentile(idle, 99)
    print(f"  B's p99 while A floods / B's idle p99: {ratio:.2f}x")
    print(goal("p99 ratio <= 1.5x", ratio <= 1.5, f"{ratio - 1.5:.2f}x"))
    return 0


def start_web(processes: Processes, workers: int, threads: int = 1) -> int:
    port = free_port()
    shape = ["--worker-class", "gthread", "--threads", str(threads)] if threads > 1 else []
    process = processes.start(
        "web",
        [
            sys.executable,
            "-m",
            "gunicorn",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(workers),
            *shape,
            "--no-control-socket",
            "wsgi:app",
        ],
        process_env(),
    )
    wait_listening(port, process)
    return port


if __name__ == "__main__":
    sys.exit(main())
