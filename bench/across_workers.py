"""Across workers: one number's messages sent by 1, then 2, then 4 worker processes.

One WhatsApp identity whose campaign lane is paced at 1,000/s, the sandbox answering
each send after 200 ms (a hosted API across the internet), and its lane split into shards
(`app/shards.py`: ceil(1000 / RATCHET_SHARD_RATE), at most RATCHET_SHARD_MAX; 4 with the
defaults), each drained by its own job. A worker process runs one drain at a time, so a
lane's shards are what lets more processes send one number. For each process count: the
sends/s from starting the workers to every message `sent`, the steady rate (first to last
receipt at the sandbox), the most receipts in any one second against the pace (rate +
burst), and the CPU per send split between the workers, PostgreSQL, Redis and the sandbox,
with how busy the machine was, to say where it stops: CPU, PostgreSQL or the pace.

    .venv/bin/python bench/send_rate.py --across [--across-messages 3000] [--counts 1,2,4]

Prints the ratios last; exits non-zero only if something broke.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from typing import Any

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

RATE = 1000.0  # the campaign lane's pace, per second
REPLY_RATE = 20.0  # the reply lane's, within the total (the rates must add up)
ANSWER_MS = 200


def one_count(
    processes: Processes, sandbox: Sandbox, app: Any, workers: int, messages: int, n: int
) -> dict[str, Any]:
    """A fresh identity and `messages` queued for it, sent by `workers` processes."""
    from app.db import get_db
    from app.repo.shards import lane_shards
    from jobs.ringing import ring_identity

    db = get_db()
    config = app.config["RATCHET"]
    # The campaign lane at RATE; replies get a little of their own within the total.
    number = create_identity(
        db, sandbox, 50 + n, reply=REPLY_RATE, campaign=RATE, total=RATE + REPLY_RATE
    )
    sandbox.call(
        "PATCH", f"/numbers/{number['phone_number_id']}", json={"answer_delay_ms": ANSWER_MS}
    )
    ids = create_messages(db, number, messages, tag=n + 2)
    with db.transaction() as session:
        from app.repo.identities import get_identity

        shards = lane_shards(get_identity(session, number["identity_id"]), "campaign", config)
    if not ring_identity(number["identity_id"], "campaign", config):
        raise BenchBroke("could not ring the drains: Redis unreachable")
    names = [f"across{workers}-{k}" for k in range(workers)]
    cpu_before = cpu_snapshot({"workers": [], "sandbox": [sandbox.process.pid]})
    machine_before = machine_ticks()
    self_before = self_cpu()
    started = time.monotonic()
    for name in names:
        processes.flask(name, ["worker", "--lane", "campaign"], process_env())
    groups = {
        "workers": [processes.started[k].pid for k in names],
        "sandbox": [sandbox.process.pid],
    }
    identity = [number["identity_id"]]

    def all_sent() -> bool:
        return count_status(db, None, ("sent",), identity_ids=identity) >= len(ids)

    try:
        done = wait_for(all_sent, limit=max(120.0, messages / 10), every=0.1, what="every send")
    except BenchBroke:
        print(f"  stuck: {status_counts(db)}; worker logs in {processes.logs}")
        raise
    cpu = cpu_delta(cpu_before, cpu_snapshot(groups))
    machine_after = machine_ticks()
    self_after = self_cpu()
    processes.stop(names)
    accepted = sandbox.accepted(number["phone_number_id"])
    per_key = Counter(a["idempotency_key"] or a["wamid"] for a in accepted)
    if len(accepted) != len(ids) or any(count > 1 for count in per_key.values()):
        raise BenchBroke(f"the sandbox accepted {len(accepted)} sends for {len(ids)} messages")
    times = sorted(a["time"] for a in accepted)
    most = most_in_a_second(times)
    wall = done - started
    steady = times[-1] - times[0]
    return {
        "workers": workers,
        "shards": shards,
        "sends": len(ids),
        "rate": len(ids) / wall,
        "steady_rate": len(ids) / steady if steady else float("inf"),
        "most_in_a_second": most,
        "cpu": cpu,
        "self_cpu": self_after - self_before,
        "machine": (machine_before, machine_after),
    }


def most_in_a_second(times: list[float]) -> int:
    """The most receipts in any one second (a window starting at each receipt); `times`
    sorted."""
    most, j = 0, 0
    for i, start in enumerate(times):
        j = max(j, i)
        while j < len(times) and times[j] < start + 1.0:
            j += 1
        most = max(most, j - i)
    return most


def main(args: argparse.Namespace) -> int:
    counts = [int(c) for c in args.counts.split(",")]
    header(
        f"Across workers: one identity paced at {RATE:.0f}/s, answers after {ANSWER_MS} ms, "
        f"{', '.join(map(str, counts))} worker processes"
    )
    reset_services()
    runs = []
    with managed() as processes:
        print(f"logs: {processes.logs}")
        sandbox = start_sandbox(processes, process_env())
        app = make_app()
        burst = RATE * app.config["RATCHET"].pacing_burst
        with app.app_context():
            for n, workers in enumerate(counts):
                run = one_count(processes, sandbox, app, workers, args.across_messages, n)
                runs.append(run)
                print(
                    f"\n[{n + 1}] {workers} worker process(es), {run['shards']} shards, "
                    f"{run['sends']} messages"
                )
                print(f"  {run['rate']:8.1f} sends/s   from starting the workers to all `sent`")
                print(f"  {run['steady_rate']:8.1f} sends/s   steady: first to last receipt")
                print(
                    f"  {run['most_in_a_second']:8d} receipts in the busiest second "
                    f"(the pace allows {RATE + burst:.0f}: rate + burst)"
                )
                print_cpu(run["cpu"], run["sends"], run["self_cpu"])
                print_machine(
                    run["machine"][0],
                    run["machine"][1],
                    sum(run["cpu"].values()) + run["self_cpu"],
                )
        app.extensions["ratchet.db"].engine.dispose()
        broken = processes.tracebacks()
    print("\nsummary (sends/s, wall | steady | against the pace)")
    first = runs[0]["rate"]
    for run in runs:
        print(
            f"  {run['workers']} worker(s): {run['rate']:7.1f} | {run['steady_rate']:7.1f} | "
            f"{run['rate'] / RATE:4.2f}x of {RATE:.0f}/s"
        )
    for run in runs[1:]:
        print(
            f"  ratio {run['workers']} workers / {runs[0]['workers']}: {run['rate'] / first:5.2f}x"
        )
    if broken:
        print("\nTRACEBACKS in logs:\n" + "\n".join(broken))
        return 1
    return 0
