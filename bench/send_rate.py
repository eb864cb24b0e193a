"""Send rate: Ratchet's drains against a no-op RQ baseline, in one run.

1. Baseline: N no-op RQ jobs (`bench.noop.noop`) worked by 2 `rq worker` processes of the
   class Ratchet uses (SimpleWorker, with the scheduler, burst mode) on one queue.
2. Ratchet: M messages of 4 identities sent to the sandbox (no webhooks, no rate limit) by
   2 `flask --app wsgi worker --lane campaign` processes, pacing set far above the rate.
3. SQL statements, transactions and Redis commands per message, counted (not timed) over
   one drain run in this process for a batch of one identity.
4. CPU per send, split between the workers, PostgreSQL, Redis and the sandbox.

    .venv/bin/python bench/send_rate.py [--messages 4000] [--jobs 5000]
    .venv/bin/python bench/send_rate.py --order | --latency   (bench/send_order.py)
    .venv/bin/python bench/send_rate.py --across   (bench/across_workers.py: one number
        at 1,000/s, answers after 200 ms, sent by 1, 2 then 4 worker processes)
    .venv/bin/python bench/send_rate.py --low-rate   (bench/low_rate.py: a send's CPU when
        its number is paced at 80/s, against one sent unpaced)

Exits non-zero only if something broke (messages not all sent in time, a duplicate send,
a traceback in a log); a missed goal is printed as such.
"""

from __future__ import annotations

import argparse
import io
import pstats
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import across_workers, low_rate, noop, send_order
from bench.common import (
    BenchBroke,
    Processes,
    Sandbox,
    count_status,
    cpu_delta,
    cpu_snapshot,
    create_identity,
    create_messages,
    goal,
    header,
    machine_ticks,
    make_app,
    managed,
    print_cpu,
    print_machine,
    process_env,
    reset_services,
    self_cpu,
    start_sandbox,
    status_counts,
    wait_for,
)
from bench.drain_counts import SQL_BATCH, commits, count_one_drain

IDENTITIES = 4
RATES = {"reply": 5000.0, "campaign": 5000.0, "total": 10000.0}
GOAL_RATIO = 3.0


def ratchet(
    processes: Processes,
    sandbox: Sandbox,
    app: Any,
    messages: int,
    workers: int,
    answer_delay_ms: int = 0,
) -> dict[str, Any]:
    from app.db import get_db
    from jobs.ringing import ring_identity

    db = get_db()
    config = app.config["RATCHET"]
    numbers = [create_identity(db, sandbox, n, **RATES) for n in range(IDENTITIES)]
    for number in numbers:  # a provider's own time to answer, as the network adds it
        path = f"/numbers/{number['phone_number_id']}"
        sandbox.call("PATCH", path, json={"answer_delay_ms": answer_delay_ms})
    ids: list[int] = []
    per = [messages // IDENTITIES + (1 if n < messages % IDENTITIES else 0) for n in range(4)]
    for number, count in zip(numbers, per, strict=True):
        ids += create_messages(db, number, count, tag=1)
    for number in numbers:
        if not ring_identity(number["identity_id"], "campaign", config):
            raise BenchBroke("could not ring a drain: Redis unreachable")
    identity_ids = [number["identity_id"] for number in numbers]
    env = process_env()
    names = [f"campaign{n}" for n in range(workers)]
    time.sleep(1.5)  # let the inserts' statistics reach pg_stat_database
    commits_before = commits(db)
    polls = 0
    cpu_before = cpu_snapshot({"workers": [], "sandbox": [sandbox.process.pid]})
    machine_before = machine_ticks()
    self_before = self_cpu()
    started = time.monotonic()
    for name in names:
        processes.flask(name, ["worker", "--lane", "campaign"], env)
    cpu_groups = {
        "workers": [processes.started[n].pid for n in names],
        "sandbox": [sandbox.process.pid],
    }
    # The workers' sessions did not exist at the first snapshot: they start from zero.

    def all_sent() -> bool:
        nonlocal polls
        polls += 1
        return count_status(db, None, ("sent",), identity_ids=identity_ids) >= len(ids)

    try:
        done = wait_for(all_sent, limit=max(120.0, messages / 20), every=0.1, what="every send")
    except BenchBroke:
        print(f"  stuck: {status_counts(db)}; worker logs in {processes.logs}")
        raise
    wall = done - started
    cpu_after = cpu_snapshot(cpu_groups)
    machine_after = machine_ticks()
    self_after = self_cpu()
    cpu = cpu_delta(cpu_before, cpu_after)
    time.sleep(1.5)
    commits_after = commits(db)
    processes.stop(names)

    receipts: list[float] = []
    per_key: Counter[str] = Counter()
    for number in numbers:
        for accepted in sandbox.accepted(number["phone_number_id"]):
            receipts.append(accepted["time"])
            per_key[accepted["idempotency_key"] or accepted["wamid"]] += 1
    duplicates = sum(n - 1 for n in per_key.values() if n > 1)
    if duplicates or len(receipts) != len(ids):
        raise BenchBroke(
            f"the sandbox accepted {len(receipts)} sends for {len(ids)} messages "
            f"({duplicates} duplicates of one provider key)"
        )
    receipts.sort()
    steady = receipts[-1] - receipts[0]
    return {
        "wall": wall,
        "rate": len(ids) / wall,
        "steady": steady,
        "steady_rate": len(ids) / steady if steady else float("inf"),
        "cpu": cpu,
        "self_cpu": self_after - self_before,
        "commits": commits_after - commits_before - polls,
        "sends": len(ids),
        "machine": (machine_before, machine_after),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=4000, help="Ratchet sends (default 4000)")
    parser.add_argument("--jobs", type=int, default=5000, help="baseline no-op jobs (default 5000)")
    parser.add_argument("--workers", type=int, default=2, help="processes on each side (2)")
    parser.add_argument(
        "--answer-delay-ms",
        type=int,
        default=0,
        help="the sandbox answers each of Ratchet's sends this late (a real provider's "
        "latency; default 0: only CPU is measured)",
    )
    parser.add_argument(
        "--profile", action="store_true", help="also cProfile the in-process drain (step 4)"
    )
    parser.add_argument(
        "--order",
        action="store_true",
        help="only the order bench: conversations posted back to back (bench/send_order.py)",
    )
    parser.add_argument("--conversations", type=int, default=1000, help="for --order (1000)")
    parser.add_argument("--parts", type=int, default=5, help="messages each, for --order (5)")
    parser.add_argument(
        "--latency",
        action="store_true",
        help="only the latency-hiding bench: --answer-delay-ms (200 if 0) against none",
    )
    parser.add_argument(
        "--across",
        action="store_true",
        help="only the across-workers bench: one number at 1,000/s by 1, 2, 4 processes",
    )
    parser.add_argument("--across-messages", type=int, default=3000, help="for --across (3000)")
    parser.add_argument("--counts", default="1,2,4", help="worker processes, for --across")
    parser.add_argument(
        "--low-rate",
        action="store_true",
        help="only the low-rate bench: a send's CPU at 80/s against one unpaced",
    )
    parser.add_argument("--low-messages", type=int, default=1200, help="for --low-rate (1200)")
    parser.add_argument("--rate", type=float, default=80.0, help="the pace, for --low-rate (80)")
    args = parser.parse_args()
    if args.across:
        return across_workers.main(args)
    if args.low_rate:
        return low_rate.main(args)
    if args.order or args.latency:
        return send_order.main(args)
    header("Ratchet send rate vs a no-op RQ baseline")
    reset_services()
    with managed() as processes:
        print(f"logs: {processes.logs}")
        sandbox = start_sandbox(processes, process_env())
        app = make_app()
        with app.app_context():
            print(
                f"\n[1] baseline: {args.jobs} no-op RQ jobs, {args.workers} x rq SimpleWorker "
                "(--burst --with-scheduler), one queue"
            )
            base = noop.baseline(processes, args.jobs, args.workers)
            print(
                f"  {base['rate']:8.1f} jobs/s   wall {base['wall']:.2f} s from starting the "
                f"workers to the last job finished (workers exited at {base['exit']:.2f} s)"
            )
            print(
                f"  {base['steady_rate']:8.1f} jobs/s   steady: first job started to last "
                f"ended, {base['steady']:.2f} s"
            )
            print_cpu(base["cpu"], args.jobs, base["self_cpu"], unit="job")
            print_machine(
                base["machine"][0], base["machine"][1], sum(base["cpu"].values()) + base["self_cpu"]
            )

            print(
                f"\n[2] Ratchet: {args.messages} messages over {IDENTITIES} identities, "
                f"{args.workers} x `flask --app wsgi worker --lane campaign`, sandbox with no "
                "webhooks and no rate limit, pacing 5000/5000/10000 per s"
                + (
                    f", each send answered {args.answer_delay_ms} ms late"
                    if args.answer_delay_ms
                    else ""
                )
            )
            run = ratchet(
                processes, sandbox, app, args.messages, args.workers, args.answer_delay_ms
            )
            print(
                f"  {run['rate']:8.1f} msgs/s   wall {run['wall']:.2f} s from starting the "
                "workers to every message `sent` (DB polled every 0.1 s)"
            )
            print(
                f"  {run['steady_rate']:8.1f} msgs/s   steady: first to last sandbox receipt, "
                f"{run['steady']:.2f} s"
            )
            ratio = run["rate"] / base["rate"]
            steady_ratio = run["steady_rate"] / base["steady_rate"]
            print(f"\n  ratio Ratchet / baseline (wall):   {ratio:5.2f}x")
            print(f"  ratio Ratchet / baseline (steady): {steady_ratio:5.2f}x")
            print(
                "  "
                + goal(
                    f"Ratchet >= {GOAL_RATIO:g}x baseline (wall)",
                    ratio >= GOAL_RATIO,
                    f"{GOAL_RATIO - ratio:.2f}x (needs {GOAL_RATIO * base['rate']:.0f} msgs/s, "
                    f"got {run['rate']:.0f})",
                )
            )
            print(
                f"  transactions committed per message (pg_stat_database, all processes, "
                f"driver polls subtracted): {run['commits'] / run['sends']:.2f}"
            )

            print("\n[3] CPU split over the Ratchet run")
            print_cpu(run["cpu"], run["sends"], run["self_cpu"])
            print_machine(
                run["machine"][0], run["machine"][1], sum(run["cpu"].values()) + run["self_cpu"]
            )
            print(
                "  (postgres: the bench database's live backends and the shared background "
                "processes; exited backends: every database's, counted when the postmaster "
                "reaps them; redis: the whole server, shared with other databases)"
            )

            print(f"\n[4] one drain in-process, {SQL_BATCH} messages of one identity (counted)")
            counted = count_one_drain(sandbox, app, args.profile)
            n = counted["messages"]
            stmts = counted["statements"]
            tx = counted["transactions"]
            print(f"  {counted['summary']}")
            print(
                f"  this process: {1000 * counted['cpu'] / n:.2f} ms CPU and "
                f"{1000 * counted['wall'] / n:.2f} ms wall per message"
                + (" (under cProfile: inflated)" if args.profile else "")
                + " (Redis MONITOR and the statement counters on)"
            )
            print(
                f"  SQL statements per message: {sum(stmts.values()) / n:.2f}  "
                f"({', '.join(f'{k} {v / n:.2f}' for k, v in stmts.most_common())})"
            )
            print(
                f"  transactions per message:   "
                f"{', '.join(f'{k} {tx[k] / n:.2f}' for k in ('BEGIN', 'COMMIT', 'ROLLBACK'))}"
            )
            print(
                f"  pings at checkout per message: {tx['ping'] / n:.2f} (the record of each "
                "provider answer pings its connection first: Database.transaction(ping=True))"
            )
            print(
                f"  PostgreSQL connections opened / closed by the pool: {tx['connect']} / "
                f"{tx['close']} for {n} messages (pool size "
                f"{app.extensions['ratchet.db'].engine.pool.size()}, RATCHET_DRAIN_CONCURRENCY "
                f"{app.config['RATCHET'].drain_concurrency})"
            )
            redis_total = sum(counted["redis"].values())
            print(
                f"  Redis commands per message: {redis_total / n:.2f} from clients "
                f"({', '.join(f'{k} {v / n:.2f}' for k, v in counted['redis'].most_common())}), "
                f"{sum(counted['lua'].values()) / n:.2f} inside Lua; "
                f"{counted['round_trips'] / n:.2f} round trips"
            )
            if counted["profile"] is not None:
                print("\n  cProfile of that drain (this process, all threads), top by own time:")
                out = io.StringIO()
                stats = pstats.Stats(counted["profile"], stream=out)
                for extra in counted["thread_profiles"]:
                    stats.add(extra)
                stats.sort_stats("tottime").print_stats(30)
                stats.sort_stats("cumulative").print_stats(45)
                print("\n".join("    " + line for line in out.getvalue().splitlines()))
        app.extensions["ratchet.db"].engine.dispose()
        broken = processes.tracebacks()
        if broken:
            print("\nTRACEBACKS in logs:\n" + "\n".join(broken))
            return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchBroke as exc:
        print(f"\nBROKEN: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("\ninterrupted; every process started was stopped", file=sys.stderr)
        sys.exit(130)
