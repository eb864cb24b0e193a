"""Low rate: what a send costs when its number is paced at WhatsApp's default 80/s.

Most numbers send at 80 a second (WhatsApp's default per-number limit), far below what a
worker can do, so their drains spend their time waiting for pacing slots. This bench sends
the same backlog twice, each with one campaign worker against the sandbox answering at
once:

1. paced: one identity at 80/s (`--rate`), `--messages` (1,200: 15 s) queued;
2. unpaced: one identity paced far above what the worker reaches, the same backlog.

It prints, for each, the rate reached (first to last receipt at the sandbox) and the CPU
per send of the worker and of PostgreSQL, then the ratio of the two CPU costs per send:
a paced send should not cost much more than one sent at full speed.

    .venv/bin/python bench/send_rate.py --low-rate [--low-messages 1200] [--rate 80]

Exits non-zero only if something broke (messages not all sent in time, a duplicate send, a
traceback in a log).
"""

from __future__ import annotations

import argparse
import math
import time
from collections import Counter
from typing import Any

from bench.across_workers import most_in_a_second
from bench.common import (
    BenchBroke,
    Processes,
    Sandbox,
    count_status,
    cpu_delta,
    cpu_snapshot,
    create_identity,
    create_messages,
    header,
    make_app,
    managed,
    print_cpu,
    process_env,
    reset_services,
    self_cpu,
    start_sandbox,
    status_counts,
    wait_for,
)
from bench.drain_counts import commits

FAR_ABOVE = 5000.0
GOAL_RATIO = 2.0  # a paced send's CPU at most this many times an unpaced one's


def listening(pid: int) -> bool:
    """The worker process `pid` has registered with RQ (it is taking jobs)."""
    from rq import Worker

    from jobs.queues import get_redis

    return any(w.pid == pid for w in Worker.all(connection=get_redis()))


def one_run(
    processes: Processes, sandbox: Sandbox, app: Any, rate: float, messages: int, n: int
) -> dict[str, Any]:
    from app.db import get_db
    from jobs.ringing import ring_identity

    db = get_db()
    number = create_identity(db, sandbox, 90 + n, reply=rate, campaign=rate, total=2 * rate)
    ids = create_messages(db, number, messages, tag=20 + n)
    name = f"low{n}"
    worker = processes.flask(name, ["worker", "--lane", "campaign"], process_env())
    # Its CPU counted from when it listens: a worker's start (about a second of imports)
    # would otherwise weigh as much as the sends.
    wait_for(lambda: listening(worker.pid), limit=60.0, every=0.05, what="the worker")
    groups = {"workers": [worker.pid], "postgres": []}
    time.sleep(1.5)  # the inserts' commits reach pg_stat_database
    commits_before, commands_before = commits(db), redis_commands()
    before = cpu_snapshot(groups)
    self_before = self_cpu()
    if not ring_identity(number["identity_id"], "campaign", app.config["RATCHET"]):
        raise BenchBroke("could not ring the drain: Redis unreachable")
    identity = [number["identity_id"]]

    polls = 0

    def all_sent() -> bool:
        nonlocal polls
        polls += 1
        return count_status(db, None, ("sent",), identity_ids=identity) >= len(ids)

    try:
        wait_for(all_sent, limit=max(120.0, 3 * messages / rate), every=0.2, what="every send")
    except BenchBroke:
        print(f"  stuck: {status_counts(db)}; worker logs in {processes.logs}")
        raise
    cpu = cpu_delta(before, cpu_snapshot(groups))
    spent_self = self_cpu() - self_before
    commands = redis_commands() - commands_before
    time.sleep(1.5)
    committed = commits(db) - commits_before - polls
    processes.stop([name])
    accepted = sandbox.accepted(number["phone_number_id"])
    per_key = Counter(a["idempotency_key"] or a["wamid"] for a in accepted)
    if len(accepted) != len(ids) or any(count > 1 for count in per_key.values()):
        raise BenchBroke(f"the sandbox accepted {len(accepted)} sends for {len(ids)} messages")
    times = sorted(a["time"] for a in accepted)
    steady = times[-1] - times[0]
    return {
        "sends": len(ids),
        "steady_rate": (len(ids) - 1) / steady if steady else float("inf"),
        "most": most_in_a_second(times),
        "cpu": cpu,
        "self_cpu": spent_self,
        "commits": committed,
        "commands": commands,
    }


def redis_commands() -> int:
    """Commands Redis has run so far (every database's: the bench's alone here)."""
    from jobs.queues import get_redis

    return int(get_redis().info("stats")["total_commands_processed"])


def main(args: argparse.Namespace) -> int:
    header(
        f"Low rate: one number paced at {args.rate:.0f}/s against one paced far above, "
        f"{args.low_messages} messages each, 1 campaign worker, answers at once"
    )
    reset_services()
    with managed() as processes:
        print(f"logs: {processes.logs}")
        sandbox = start_sandbox(processes, process_env())
        app = make_app()
        print(f"RATCHET_PACING_AHEAD: {app.config['RATCHET'].pacing_ahead} s")
        runs = {}
        with app.app_context():
            for n, (label, rate) in enumerate((("paced", args.rate), ("unpaced", FAR_ABOVE))):
                started = time.monotonic()
                run = one_run(processes, sandbox, app, rate, args.low_messages, n)
                runs[label] = run
                print(f"\n[{label}] paced at {rate:.0f}/s, {time.monotonic() - started:.1f} s")
                print(f"  {run['steady_rate']:8.1f} sends/s   first to last receipt")
                allowed = rate + math.ceil(rate * app.config["RATCHET"].pacing_burst)
                print(
                    f"  {run['most']:8d} receipts in the busiest second (the pace allows "
                    f"{allowed:.0f}: rate + burst)"
                )
                sends = run["sends"]
                print(
                    f"  {run['commits'] / sends:8.2f} transactions and "
                    f"{run['commands'] / sends:.1f} Redis commands per send"
                )
                print_cpu(run["cpu"], run["sends"], run["self_cpu"])
        app.extensions["ratchet.db"].engine.dispose()
        broken = processes.tracebacks()
    paced, unpaced = runs["paced"], runs["unpaced"]
    worker = paced["cpu"]["workers"] / unpaced["cpu"]["workers"]
    postgres = paced["cpu"]["postgres"] / unpaced["cpu"]["postgres"]
    print(f"\n  pace kept: {paced['steady_rate'] / args.rate:6.4f} of {args.rate:.0f}/s")
    print(f"  ratio PostgreSQL CPU per send, paced / unpaced: {postgres:5.2f}x")
    mark = "met" if worker <= GOAL_RATIO else "MISSED"
    print(
        f"  ratio worker CPU per send, paced / unpaced: {worker:5.2f}x "
        f"(goal <= {GOAL_RATIO:.1f}x: {mark})"
    )
    if broken:
        print("\nTRACEBACKS in logs:\n" + "\n".join(broken))
        return 1
    return 0
