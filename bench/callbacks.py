"""Status callbacks: the webhook intake with callbacks on against off, and the lag of a
callback behind the change it reports.

Two gunicorns serve `wsgi:app` alike; the deliveries (signed single-status `delivered`
for `sent` messages, bench/webhook_rate.py's rounds) go in rounds alternating between
them. Before each round of the `on` side the tenant registers a callback endpoint (so
each applied change writes its outbox row in the same transaction, and the trigger
NOTIFYs); the `off` side's rounds run with none (the trigger's one index probe). A
callbacks worker and the sweeper (whose listener rings the drains) run throughout, and
post to a receiver on 127.0.0.1 answering at once, then, in a second set of rounds,
after 200 ms. The `on` side's rate therefore pays for the outbox write and, on the same
two cores, for the delivery of the callbacks too.

The lag of a callback: when the receiver got it, less when Ratchet received the webhook
that applied its change (the event's receipt time), both on this machine's clock.

    .venv/bin/python bench/callbacks.py [--deliveries 1500] [--rounds 4] [--concurrency 4]
        [--no-delivery]

`--no-delivery` runs no callbacks worker and no sweeper: the `on` side pays for the outbox
write alone.

Uses the database and Redis of bench/common.py. Exits non-zero only if something broke.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import (
    SECRET_KEY,
    BenchBroke,
    goal,
    header,
    make_app,
    managed,
    percentile,
    process_env,
    reset_services,
    wait_for,
)
from bench.webhook_rate import HISTORY, Side, create_history, create_world, run_round, start_side

GOAL_RATIO = 0.8
WARMUP = 100


class Receiver:
    """Takes every POST, notes when (by webhook-id), answers 204 after `delay` seconds."""

    def __init__(self) -> None:
        self.delay = 0.0
        self.arrived: dict[str, float] = {}
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                now = time.time()
                with receiver.lock:
                    receiver.arrived.setdefault(self.headers.get("webhook-id", ""), now)
                if receiver.delay:
                    time.sleep(receiver.delay)
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/ratchet"


def add_endpoint(db: Any, identity_id: int, url: str) -> int:
    from sqlalchemy import select

    from app.clock import utcnow
    from app.crypto import SecretBox
    from app.models import Identity
    from app.repo.callback_endpoints import EVENTS, create_endpoint

    with db.transaction() as session:
        tenant_id = session.scalar(select(Identity.tenant_id).where(Identity.id == identity_id))
        endpoint, _ = create_endpoint(
            session,
            SecretBox(SECRET_KEY),
            tenant_id=tenant_id,
            url=url,
            host="127.0.0.1",
            events=list(EVENTS),
            now=utcnow(),
        )
        return int(endpoint.id)


def applied_times(db: Any, endpoint_id: int) -> dict[str, float]:
    """webhook-id -> when Ratchet received the webhook whose change the callback reports."""
    from sqlalchemy import text

    with db.transaction() as session:
        rows = session.execute(
            text(
                "SELECT c.id, e.received_at FROM callbacks c JOIN message_events e "
                "ON e.message_id = c.message_id AND e.to_status = 'delivered' AND e.applied "
                "WHERE c.endpoint_id = :endpoint"
            ),
            {"endpoint": endpoint_id},
        )
        return {f"cb_{row.id}": row.received_at.timestamp() for row in rows}


def delete_endpoint(db: Any, endpoint_id: int) -> None:
    from app.repo.callback_endpoints import delete_endpoint as delete
    from app.repo.callback_endpoints import get_endpoint

    with db.transaction() as session:
        endpoint = get_endpoint(session, None, endpoint_id)
        assert endpoint is not None
        delete(session, endpoint)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deliveries", type=int, default=1500, help="per side and delay")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds per delay")
    parser.add_argument("--concurrency", type=int, default=4, help="connections at once (4)")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers per side (2)")
    parser.add_argument(
        "--no-delivery",
        action="store_true",
        help="no callbacks worker and no sweeper: the outbox write alone (no lag measured)",
    )
    args = parser.parse_args()

    header("status callbacks: webhook intake with callbacks on against off, and their lag")
    os.environ["RATCHET_CALLBACK_ALLOW_HOSTS"] = "127.0.0.1"
    reset_services()
    app = make_app(callback_allow_hosts=("127.0.0.1",))
    receiver = Receiver()
    results = []
    try:
        with app.app_context(), managed() as processes:
            from app.db import get_db

            db = get_db()
            identity_id = create_world(db)
            create_history(db, identity_id, HISTORY)
            if not args.no_delivery:
                processes.flask("callbacks", ["worker", "--lane", "callbacks"], process_env())
                processes.flask("sweeper", ["sweep"], process_env())
            off, on = Side("off", "wsgi:app"), Side("on", "wsgi:app")
            for side in (off, on):
                start_side(processes, side, args.workers)
                run_round(processes, side, db, identity_id, "warm", WARMUP, args.concurrency, False)
            per_round = max(1, args.deliveries // args.rounds)
            for delay in (0.0,) if args.no_delivery else (0.0, 0.2):
                receiver.delay = delay
                off, on = (
                    Side("off", off.wsgi, off.port, off.process),
                    Side("on", on.wsgi, on.port, on.process),
                )
                lags: list[float] = []
                for n in range(args.rounds):
                    order = (off, on) if n % 2 == 0 else (on, off)
                    for side in order:
                        endpoint = (
                            add_endpoint(db, identity_id, receiver.url) if side is on else None
                        )
                        tag = f"{int(delay * 1000)}-{n}"
                        run_round(
                            processes, side, db, identity_id, tag, per_round, args.concurrency
                        )
                        if endpoint is None:
                            continue
                        if args.no_delivery:
                            delete_endpoint(db, endpoint)
                            continue
                        applied = applied_times(db, endpoint)
                        if len(applied) != per_round:
                            raise BenchBroke(f"{len(applied)} callbacks for {per_round} changes")
                        wait_for(
                            lambda a=applied: all(k in receiver.arrived for k in a),
                            120,
                            what="every callback of the round at the receiver",
                        )
                        lags += [receiver.arrived[k] - t for k, t in applied.items()]
                        delete_endpoint(db, endpoint)
                results.append((delay, off, on, lags))
            broken = processes.tracebacks()
            if broken:
                raise BenchBroke("a traceback in a log:\n" + "\n".join(broken))
    except BenchBroke as exc:
        print(f"BROKE: {exc}", file=sys.stderr)
        return 1
    finally:
        receiver.server.shutdown()

    print(
        f"gunicorn --workers {args.workers} (sync) per side, {args.concurrency} connections, "
        f"{args.rounds} rounds of {max(1, args.deliveries // args.rounds)} deliveries per side "
        "and receiver delay, alternating; a callbacks worker and the sweeper running"
    )
    print()
    print(
        "| receiver answers | off (deliveries/s) | on (deliveries/s) | on / off "
        "| callback lag p50 | p99 | max |"
    )
    print("|---|---|---|---|---|---|---|")
    worst = None
    for delay, off, on, lags in results:
        ratio = on.rate / off.rate
        worst = ratio if worst is None else min(worst, ratio)
        lag = (
            f"{1000 * percentile(lags, 50):.0f} ms | {1000 * percentile(lags, 99):.0f} ms | "
            f"{1000 * max(lags):.0f} ms"
            if lags
            else "- | - | -"
        )
        answers = "(no delivery)" if args.no_delivery else f"after {int(delay * 1000)} ms"
        print(f"| {answers} | {off.rate:.1f} | {on.rate:.1f} | {ratio:.2f}x | {lag} |")
    print()
    assert worst is not None
    print(goal(f">= {GOAL_RATIO}x of off", worst >= GOAL_RATIO, f"{GOAL_RATIO - worst:.2f}x"))
    print("(one run on a shared machine: the figures move between runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
