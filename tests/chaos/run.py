"""One fault run, whatever its size (`chaos_run(plan, ...)`): the whole system as processes
on a PostgreSQL cluster of its own, driven only through the API, the webhooks the sandbox
posts and the operator's CLI, with every fault of `faults.py`; then the checker's line.

1. Intake: the web under gunicorn, no worker yet. The clients post every message with an
   Idempotency-Key, some cutting their own connection first, all retrying the same key
   after a 5xx or a connection error; PostgreSQL is restarted (fast) midway. The operator
   cancels a few queued messages through the API.
2. Sending: workers and the sweeper start on the whole backlog, and the injector and the
   operator fire their faults as the messages finish. The sandbox answers some recipients
   5xx and 429, accepts and then hangs for another, refuses another for good, and posts
   every status webhook twice, shuffled and late.
3. The checker's line, what happened (`Outcome.report`), and how long it took.

On `hosts_wanted` hosts (tests/chaos/hosts.py: network namespaces on veth links) each
host runs a web and campaign workers, the first also the sweeper and the operator's CLI;
they reach the run's PostgreSQL cluster and Redis through the forwarders at the hosts'
service address, and the sandbox through the answer gate listening at that address. The
clients post through every host's web in turn. Where namespaces cannot be made, the run
goes on this machine's network alone, and its report says so and why.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from redis import Redis
from sqlalchemy import select, update
from sqlalchemy.exc import DBAPIError

from app.models import Identity, Message, MessageEvent

from ..conftest import make_app
from ..jobs.conftest import Env
from ..jobs.outcomes import finished, verdict_of
from .answer_gate import AnswerGate
from .checker import Acknowledged, Verdict
from .clients import Client
from .faults import (
    CUT_MID_TRANSACTION,
    KILLED_AIMED,
    KILLED_ANSWERED,
    KILLED_AT_RANDOM,
    OBSERVER,
    TIMEOUT_AFTER_ACCEPT,
    UNDELIVERABLE,
    Injector,
    Operator,
    Plan,
)
from .hosts import Network, hosts, namespaces_missing
from .private_pg import PrivatePostgres
from .system import System

PROVIDER_TIMEOUT = 3.0
WEBHOOK_GRACE = 2.0
HANG_SECONDS = 4.0
WEBHOOK_DELAY_MS = 300
PACING_SLOWDOWN = 5.0
LIMIT = 1200.0  # seconds for the sending phase


@dataclass
class Outcome:
    verdict: Verdict
    happened: Counter[str]
    intake_seconds: float
    sending_seconds: float
    asked_to_cancel: set[int]
    requeued: list[int]
    dead: dict[int, tuple[str, str | None]]  # dead letters: recipient, failure class
    requeue_cycles: dict[int, int]  # requeued message: the cycles its changes reached
    placement: str  # how many hosts, or why none
    slowest: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    tracebacks: list[str] = field(default_factory=list)

    def report(self) -> str:
        faults = "\n".join(f"  {name}: {n}" for name, n in sorted(self.happened.items()))
        slowest = "\n".join(f"  {line}" for line in self.slowest)
        return (
            f"{self.verdict.line()}\n{self.placement}\n"
            f"intake {self.intake_seconds:.0f} s, sending {self.sending_seconds:.0f} s; "
            f"faults that happened:\n{faults}\nthe slowest to leave the queue:\n{slowest}\n"
            f"logs with a traceback (each a fault's, or a crash): "
            f"{', '.join(self.tracebacks) or 'none'}"
        )


def chaos_run(
    plan: Plan,
    cluster: PrivatePostgres,
    redis_url: str,
    sandbox_url: str,
    logs: Path,
    hosts_wanted: int = 0,
) -> Outcome:
    """The run on `hosts_wanted` hosts (0: this machine's network)."""
    missing = namespaces_missing() if hosts_wanted else None
    if not hosts_wanted or missing is not None:
        placement = "hosts 0: every process on this machine's network"
        if missing is not None:
            placement += f" ({hosts_wanted} wanted, but {missing})"
        return _run(plan, cluster, redis_url, sandbox_url, logs, None, placement)
    with hosts(hosts_wanted, logs=logs, pg_url=cluster.url, redis_url=redis_url) as network:
        placement = (
            f"hosts {hosts_wanted} (network namespaces on veth links): a web and "
            f"campaign workers on each, the sweeper and the CLI on the first"
        )
        return _run(plan, cluster, redis_url, sandbox_url, logs, network, placement)


def _run(
    plan: Plan,
    cluster: PrivatePostgres,
    redis_url: str,
    sandbox_url: str,
    logs: Path,
    network: Network | None,
    placement: str,
) -> Outcome:
    settings = {
        "RATCHET_PROVIDER_TIMEOUT": str(PROVIDER_TIMEOUT),
        "RATCHET_WEBHOOK_GRACE": str(WEBHOOK_GRACE),
        "RATCHET_SWEEP_INTERVAL": "0.5",
        # Each 429 halves the identity's rates for this long (a minute by default; with
        # several 429s in a run the rest of it would crawl at a sixty-fourth).
        "RATCHET_PACING_SLOWDOWN": str(PACING_SLOWDOWN),
        "RATCHET_SHARD_RATE": str(plan.shard_rate),
        "RATCHET_SHARD_MAX": "8",
    }
    system = System(cluster, redis_url, logs, settings, network=network)
    app = make_app(
        f"{cluster.url}?application_name={OBSERVER}",
        redis_url,
        provider_timeout=PROVIDER_TIMEOUT,
        webhook_grace=WEBHOOK_GRACE,
        public_base_url=system.url,
    )
    env = Env(app, app.extensions["ratchet.db"], system.url, sandbox_url)
    redis = Redis.from_url(redis_url)
    happened: Counter[str] = Counter()
    operator: Operator | None = None
    injector: Injector | None = None
    gate: AnswerGate | None = None
    try:
        system.start_web()
        env.sandbox("POST", "/reset")
        number = env.number(
            honour_idempotency_keys=True,
            hang_seconds=HANG_SECONDS,
            duplicate_webhooks=True,
            shuffle_webhooks=True,
            webhook_delay_ms=WEBHOOK_DELAY_MS,
        )
        rate = plan.campaign_rate
        env.set_rates(number, reply_rate=10.0, campaign_rate=rate, total_rate=rate + 10.0)
        client = Client(system.urls, number["api_key"], number["identity_id"])
        operator = Operator(plan, system, client, number["identity_id"], env.db)

        began = time.monotonic()
        recipients = plan.recipients()
        acks = intake(plan, recipients, client, cluster, happened)
        ids = [ack.message_id for ack in acks]
        intake_seconds = time.monotonic() - began
        operator.ids = ids
        operator.undeliverable = [a.message_id for a in acks if a.recipient == UNDELIVERABLE]
        chooser = random.Random(plan.seed + 4)
        operator.cancel(chooser.sample(ids, plan.cancels_in_intake), "in intake")

        began = time.monotonic()
        # The workers reach the sandbox through the gate, which can kill one as its
        # answer arrives (on hosts, at the address they reach this machine at).
        sandbox = urlsplit(sandbox_url)
        listen = network.service if network is not None else "127.0.0.1"
        target = (sandbox.hostname or "127.0.0.1", sandbox.port or 80)
        gate = AnswerGate(*target, lambda: live(), listen_host=listen)
        with env.db.transaction() as session:
            session.execute(
                update(Identity)
                .where(Identity.id == number["identity_id"])
                .values(base_url=f"{gate.url}/v21.0")
            )
        lease = app.config["RATCHET"].drain_lease_seconds
        injector = Injector(plan, system, redis, lease, gate)
        live = injector.live_pids
        injector.hanging_ids = {a.message_id for a in acks if a.recipient == TIMEOUT_AFTER_ACCEPT}
        system.start_workers(plan.workers)
        system.start_sweeper()
        operator.start()
        progress = 0.0
        deadline = time.monotonic() + LIMIT
        while time.monotonic() < deadline:
            try:
                done = finished(env, ids)
            except DBAPIError:
                done = round(progress * len(ids))  # PostgreSQL restarting: no reading
            progress = done / len(ids)
            operator.progress = progress
            injector.tick(progress, env.db)
            all_fired = not (injector.kills_left or injector.cuts_left or injector.stopped)
            if done == len(ids) and all_fired and operator.finished.is_set():
                break
            operator.stop.wait(0.1)
        sending_seconds = time.monotonic() - began
    finally:
        if operator is not None:
            operator.stop.set()
            if operator.is_alive():
                operator.join(timeout=30)
        if injector is not None:
            injector.release()
        system.stop()
        if gate is not None:
            gate.close()
        redis.close()

    env.db.engine.dispose()  # connections from before the restart
    verdict = verdict_of(env, number, "whatsapp", acks)
    happened += injector.happened + operator.happened + client.counts
    happened += sandbox_faults(env, number)
    happened[f"worker processes started ({plan.workers} at a time)"] = system.started
    outcome = Outcome(
        verdict,
        happened,
        intake_seconds,
        sending_seconds,
        operator.asked_to_cancel,
        operator.requeued,
        dead_letters(env, ids),
        requeue_cycles(env, operator.requeued),
        placement,
        slowest(env, acks),
        operator.errors,
        system.tracebacks(),
    )
    client.close()
    env.close()
    app.extensions["ratchet.db"].dispose()
    app.extensions["ratchet.redis"].close()
    return outcome


def intake(
    plan: Plan,
    recipients: list[str],
    client: Client,
    cluster: PrivatePostgres,
    happened: Counter[str],
) -> list[Acknowledged]:
    """Post every message from four client threads; PostgreSQL restarts at 40 %."""
    chooser = random.Random(plan.seed + 5)
    cuts = ["after-body", "mid-body"]
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures: list[Future[Acknowledged]] = []
        for n, to in enumerate(recipients):
            cut = chooser.choice(cuts) if chooser.random() < plan.cut_share else None
            futures.append(pool.submit(client.send, to, f"chaos-{plan.seed}-{n}", cut))
        pending = set(futures)
        while pending:
            _, pending = wait(pending, timeout=0.05, return_when=FIRST_COMPLETED)
            posted = len(futures) - len(pending)
            if posted >= 0.4 * len(futures) and not happened["PostgreSQL restarted in intake"]:
                down = cluster.restart("fast")
                happened["PostgreSQL restarted in intake"] += 1
                happened[f"PostgreSQL down {down:.1f} s (restarted in intake)"] += 1
        return [future.result() for future in futures]


def sandbox_faults(env: Env, number: dict) -> Counter[str]:
    """What the sandbox did to our sends, from its request log."""
    counts: Counter[str] = Counter()
    for entry in env.requests(number):
        status = entry.get("http_status")
        if entry.get("fault") == "timeout_after_accept":
            counts["sandbox: accepted, then no answer in time"] += 1
        elif status is not None and status >= 500:
            counts[f"sandbox: {status} ({entry.get('fault')})"] += 1
        elif status == 429:
            counts[f"sandbox: 429 ({entry.get('fault') or 'the number rate'})"] += 1
    webhooks = env.sandbox("GET", f"/webhooks?phone_number_id={number['phone_number_id']}")
    counts["sandbox: webhooks posted (each twice, shuffled, late)"] = len(webhooks["webhooks"])
    return counts


def dead_letters(env: Env, ids: list[int]) -> dict[int, tuple[str, str | None]]:
    with env.db.transaction() as session:
        rows = session.execute(
            select(Message.id, Message.recipient, Message.failure_class).where(
                Message.id.in_(ids), Message.status == "failed"
            )
        ).all()
    return {row.id: (row.recipient, row.failure_class) for row in rows}


def requeue_cycles(env: Env, requeued: list[int]) -> dict[int, int]:
    with env.db.transaction() as session:
        rows = session.execute(
            select(MessageEvent.message_id, MessageEvent.cycle).where(
                MessageEvent.message_id.in_(requeued), MessageEvent.applied.is_(True)
            )
        ).all()
    cycles: dict[int, int] = dict.fromkeys(requeued, 0)
    for row in rows:
        cycles[row.message_id] = max(cycles[row.message_id], row.cycle)
    return cycles


def complaints(outcome: Outcome, plan: Plan) -> list[str]:
    """Everything wrong with a run besides the checker's line: a fault that never
    happened, a dead letter nothing explains, a requeue that did not take."""
    wrong = []
    happened = outcome.happened
    kills = happened[KILLED_AT_RANDOM] + happened[KILLED_AIMED] + happened[KILLED_ANSWERED]
    expected = {
        "kills": (kills, plan.kills),
        "Redis flushes": (happened["Redis flushed"], 1),
        "PostgreSQL restarts in intake": (happened["PostgreSQL restarted in intake"], 1),
        "PostgreSQL restarts while sending": (happened["PostgreSQL restarted while sending"], 1),
        "SIGSTOPs": (happened["SIGSTOP past the lease"], 1),
        "SIGCONTs": (happened["SIGCONT"], 1),
        "pauses": (happened["pause (CLI)"], 1),
        "resumes": (happened["resume (CLI)"], 1),
        "requeues": (len(outcome.requeued), plan.requeues),
        "cuts mid-transaction": (happened[CUT_MID_TRANSACTION], plan.transaction_cuts),
        "kills as an answer arrived": (happened[KILLED_ANSWERED], 1 if plan.kills > 1 else 0),
    }
    for what, (seen, wanted) in expected.items():
        if seen != wanted:
            wrong.append(f"{what}: {seen}, not {wanted}")
    if not any(name.startswith("connection cut by the client") for name in happened):
        wrong.append("no client cut its own connection")
    for message_id, (recipient, failure_class) in outcome.dead.items():
        if failure_class == "canceled" and message_id in outcome.asked_to_cancel:
            continue
        if failure_class == "permanent" and recipient.endswith(UNDELIVERABLE):
            continue
        wrong.append(f"dead letter {message_id} to {recipient} ({failure_class}) unexplained")
    for message_id, cycle in outcome.requeue_cycles.items():
        if cycle < 1:
            wrong.append(f"requeued message {message_id} never began a new cycle")
    return wrong + outcome.errors


def slowest(env: Env, acks: list[Acknowledged], count: int = 8) -> list[str]:
    """The messages longest from acknowledgement to leaving the queue, with the changes
    their timelines record (kind: how many), to say where the p99 comes from."""
    by_id = {a.message_id: a for a in acks}
    with env.db.transaction() as session:
        events = session.execute(
            select(
                MessageEvent.message_id,
                MessageEvent.kind,
                MessageEvent.to_status,
                MessageEvent.applied,
                MessageEvent.received_at,
            )
            .where(MessageEvent.message_id.in_(list(by_id)))
            .order_by(MessageEvent.id)
        ).all()
    left: dict[int, float] = {}
    kinds: dict[int, Counter[str]] = {}
    for event in events:
        kinds.setdefault(event.message_id, Counter())[event.kind] += 1
        if event.applied and event.to_status in ("sent", "delivered", "read", "failed"):
            left.setdefault(event.message_id, event.received_at.timestamp())
    ranked = sorted(left, key=lambda i: left[i] - by_id[i].at, reverse=True)[:count]
    return [
        f"{i} to {by_id[i].recipient}: {left[i] - by_id[i].at:.1f} s "
        f"({', '.join(f'{k} {n}' for k, n in sorted(kinds[i].items()))})"
        for i in ranked
    ]
