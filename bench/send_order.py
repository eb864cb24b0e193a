"""The send path's order and latency hiding, run from `bench/send_rate.py`:

- `--order`: conversations of several messages each, posted back to back, sent by one
  identity and campaign worker; how many people got theirs out of order at the sandbox,
  and the rate, beside the same number of messages to as many different people (the
  unordered case: nothing to keep in order).
- `--latency`: one identity, one campaign worker, the sandbox answering after
  `--answer-delay-ms` against answering at once: the rate's ratio (the goal is >= 0.9x).

Neither is a test: each prints its ratio last.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections import defaultdict
from pathlib import Path
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
    make_app,
    managed,
    process_env,
    reset_services,
    start_sandbox,
    status_counts,
    wait_for,
)

RATES = {"reply": 5000.0, "campaign": 5000.0, "total": 10000.0}


def conversation_messages(
    db: Any, number: dict[str, Any], conversations: int, parts: int
) -> list[int]:
    """`parts` queued messages to each of `conversations` people, each person's posted back
    to back, in one transaction; the text names the part."""
    from app.clock import utcnow
    from app.repo.messages import NewMessage, create_message

    now = utcnow()
    ids = []
    with db.transaction() as session:
        for person in range(conversations):
            for part in range(parts):
                message, _ = create_message(
                    session,
                    NewMessage(
                        tenant_id=number["tenant_id"],
                        identity_id=number["identity_id"],
                        recipient=f"19{number['identity_id'] % 100:02d}{person:07d}",
                        lane="campaign",
                        fingerprint=f"order-{person}-{part}".ljust(64, "f"),
                        body_text=f"part {part}",
                    ),
                    now,
                )
                ids.append(message.id)
    return ids


def worker_connections(db: Any, pids: list[int]) -> int:
    """TCP connections to PostgreSQL's port (5432) these processes hold (Linux: their
    socket descriptors, matched in /proc/net/tcp)."""
    del db
    inodes = set()
    for pid in pids:
        fds = Path(f"/proc/{pid}/fd")
        for fd in fds.iterdir() if fds.exists() else ():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
    held = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                if fields[2].endswith(":1538") and fields[9] in inodes:
                    held += 1
    return held


def timed_run(
    processes: Processes,
    app: Any,
    number: dict[str, Any],
    count: int,
    workers: int,
    name: str,
) -> float:
    """Ring the identity's campaign drain, start `workers` campaign workers, and return
    the rate from their start to every message `sent`; print the most PostgreSQL
    connections the workers held meanwhile."""
    from app.db import get_db
    from jobs.ringing import ring_identity

    db = get_db()
    most = 0
    if not ring_identity(number["identity_id"], "campaign", app.config["RATCHET"]):
        raise BenchBroke("could not ring a drain: Redis unreachable")
    names = [f"{name}{n}" for n in range(workers)]
    started = time.monotonic()
    for worker in names:
        processes.flask(worker, ["worker", "--lane", "campaign"], process_env())

    def all_sent() -> bool:
        nonlocal most
        most = max(most, worker_connections(db, [processes.started[n].pid for n in names]))
        sent = count_status(db, None, ("sent",), identity_ids=[number["identity_id"]])
        return sent >= count

    try:
        done = wait_for(all_sent, limit=max(120.0, count / 10), every=0.1, what=name)
    except BenchBroke:
        print(f"  stuck: {status_counts(db)}; worker logs in {processes.logs}")
        raise
    pids = [processes.started[n].pid for n in names]
    cpu = cpu_delta({}, cpu_snapshot({"workers": pids}))["workers"]
    processes.stop(names)
    print(
        f"  (PostgreSQL connections the worker process held at most: {most}; worker CPU "
        f"{1000 * cpu / count:.2f} ms per send, {100 * cpu / (done - started):.0f}% of a core)"
    )
    return count / (done - started)


def out_of_order(sandbox: Sandbox, number: dict[str, Any]) -> tuple[int, int]:
    """(people whose messages the sandbox accepted in another order than posted, people)."""
    parts: dict[str, list[int]] = defaultdict(list)
    for accepted in sandbox.accepted(number["phone_number_id"]):
        parts[accepted["to"]].append(int(accepted["body"]["text"]["body"].split()[-1]))
    return sum(1 for seen in parts.values() if seen != sorted(seen)), len(parts)


def order(processes: Processes, sandbox: Sandbox, app: Any, conversations: int, parts: int) -> None:
    from app.db import get_db

    db = get_db()
    total = conversations * parts
    print(
        f"\n[order] {conversations} conversations of {parts} messages each, posted back to "
        "back, one identity, 1 campaign worker, default settings, pacing far above"
    )
    ordered = create_identity(db, sandbox, 60, **RATES)
    conversation_messages(db, ordered, conversations, parts)
    rate = timed_run(processes, app, ordered, total, 1, "ordered")
    wrong, people = out_of_order(sandbox, ordered)
    print(f"  {rate:8.1f} msgs/s   out of order at the sandbox: {wrong} of {people} people")
    unordered = create_identity(db, sandbox, 61, **RATES)
    create_messages(db, unordered, total, tag=6)
    base = timed_run(processes, app, unordered, total, 1, "unordered")
    print(f"  {base:8.1f} msgs/s   the unordered case: {total} messages to {total} people")
    print(f"\n  ratio conversations / unordered: {rate / base:5.2f}x; out of order: {wrong}")


def latency(processes: Processes, sandbox: Sandbox, app: Any, messages: int, delay_ms: int) -> None:
    from app.db import get_db

    db = get_db()
    print(
        f"\n[latency] {messages} messages of one identity, 1 campaign worker, default "
        f"settings, answers at once against answers {delay_ms} ms late"
    )
    rates = []
    for n, delay in enumerate((0, delay_ms)):
        number = create_identity(db, sandbox, 70 + n, **RATES)
        path = f"/numbers/{number['phone_number_id']}"
        sandbox.call("PATCH", path, json={"answer_delay_ms": delay})
        create_messages(db, number, messages, tag=7 + n)
        rates.append(timed_run(processes, app, number, messages, 1, f"latency{n}"))
        print(f"  {rates[-1]:8.1f} msgs/s   answers {delay} ms late")
    ratio = rates[1] / rates[0]
    mark = "met" if ratio >= 0.9 else "MISSED"
    print(f"\n  ratio {delay_ms} ms / 0 ms: {ratio:5.2f}x (goal >= 0.9x: {mark})")


def main(args: argparse.Namespace) -> int:
    header("Ratchet's send path: conversation order and latency hiding")
    reset_services()
    with managed() as processes:
        print(f"logs: {processes.logs}")
        sandbox = start_sandbox(processes, process_env())
        app = make_app()
        with app.app_context():
            if args.order:
                order(processes, sandbox, app, args.conversations, args.parts)
            if args.latency:
                delay = args.answer_delay_ms or 200
                latency(processes, sandbox, app, args.messages, delay)
        app.extensions["ratchet.db"].engine.dispose()
        broken = processes.tracebacks()
        if broken:
            print("\nTRACEBACKS in logs:\n" + "\n".join(broken))
            return 1
    return 0
