"""What both benchmarks share: the services, the processes they start, CPU accounting.

Only the PostgreSQL database `bench` and Redis database 9 are touched (unless the two
BENCH_ variables below say otherwise). Every process is
started in its own session (process group) and killed by group at the end, also on Ctrl-C
or an exception.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import selectors
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from redis import Redis  # noqa: E402
from sqlalchemy import create_engine, make_url, text  # noqa: E402

# BENCH_DATABASE_URL / BENCH_REDIS_URL point a run elsewhere (a database of its own when
# several people share the machine); the defaults are the ones docs/performance.md names.
PG_URL = os.environ.get("BENCH_DATABASE_URL", "postgresql+psycopg://127.0.0.1:5432/bench")
PG_DATABASE = PG_URL.rsplit("/", 1)[1].split("?", 1)[0]
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/9")
SECRET_KEY = "bench-secret-key-not-for-production"
SANDBOX_TOKEN = "bench-token"
SANDBOX_SECRET = "bench-app-secret"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PR_SET_PDEATHSIG = 1


class BenchBroke(RuntimeError):
    """Something broke (not a missed goal): the script exits non-zero."""


def header(title: str) -> None:
    model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    command = " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv])
    print(f"== {title}")
    print(f"machine: nproc {os.cpu_count()}, CPU {model}, Python {platform.python_version()}")
    print(f"date:    {datetime.now(UTC).isoformat(timespec='seconds')}")
    print(f"repro:   cd {ROOT} && {command}")
    print(f"services: {PG_URL} (schema recreated), {REDIS_URL} (flushed)")
    print(flush=True)


def goal(label: str, ok: bool, miss: str) -> str:
    return f"goal {label}: {'met' if ok else 'goal missed by ' + miss}"


# The services ------------------------------------------------------------------------


def ensure_database(url: str) -> None:
    """Create the database `url` names, through its server's `postgres` database, if it is
    missing (a fresh machine has none for the benches), and say so."""
    target = make_url(url)
    admin = create_engine(target.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            found = connection.execute(
                text("SELECT 1 FROM pg_database WHERE datname = :name"),
                {"name": target.database},
            ).first()
            if found is None:
                name = connection.dialect.identifier_preparer.quote(str(target.database))
                connection.execute(text(f"CREATE DATABASE {name}"))
                print(f"created the database {target.database!r}", flush=True)
    finally:
        admin.dispose()


def reset_services() -> None:
    """Empty and migrate the `bench` database (created if missing); flush Redis db 9."""
    from app import migrate
    from app.db import build_engine

    ensure_database(PG_URL)
    engine = build_engine(PG_URL)
    with engine.begin() as connection:
        connection.execute(text("DROP SCHEMA IF EXISTS public CASCADE"))
        connection.execute(text("CREATE SCHEMA public"))
    migrate.upgrade(engine)
    engine.dispose()
    redis = Redis.from_url(REDIS_URL)
    redis.flushdb()
    redis.close()


def make_app(**overrides: Any) -> Any:
    from app import create_app

    values = {"database_url": PG_URL, "redis_url": REDIS_URL, "secret_key": SECRET_KEY}
    values.update(overrides)
    return create_app(values)


def process_env(public_base_url: str = "http://127.0.0.1:9", **settings: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PYTHONUNBUFFERED": "1",
        "DATABASE_URL": PG_URL,
        "REDIS_URL": REDIS_URL,
        "SECRET_KEY": SECRET_KEY,
        "PUBLIC_BASE_URL": public_base_url,
        **settings,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class Processes:
    """Every process a benchmark starts, each in its own session, logs in one folder."""

    logs: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="ratchet-bench-")))
    started: dict[str, subprocess.Popen[Any]] = field(default_factory=dict)

    def start(
        self, name: str, argv: list[str], env: dict[str, str], *, stdout_pipe: bool = False
    ) -> subprocess.Popen[Any]:
        path = self.logs / f"{name}.log"
        for n in range(2, 100):  # a second process of this name keeps the first one's log
            if not path.exists():
                break
            path = self.logs / f"{name}-{n}.log"
        log = path.open("w")
        process = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE if stdout_pipe else log,
            stderr=log if stdout_pipe else subprocess.STDOUT,
            text=True,
            preexec_fn=_die_with_parent,
            start_new_session=True,
        )
        log.close()  # the child keeps its own descriptor
        self.started[name] = process
        return process

    def flask(self, name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen[Any]:
        return self.start(name, [sys.executable, "-m", "flask", "--app", "wsgi", *args], env)

    def stop(self, names: list[str] | None = None, timeout: float = 20.0) -> None:
        """SIGTERM, wait, then SIGKILL the whole group of each."""
        chosen = {n: p for n, p in self.started.items() if names is None or n in names}
        for process in chosen.values():
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in chosen.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)  # what is left of its group
            if process.stdout is not None:
                process.stdout.close()
        for name in chosen:
            self.started.pop(name)

    def tracebacks(self) -> list[str]:
        """Names of logs holding a Python traceback, with its tail."""
        found = []
        for path in sorted(self.logs.glob("*.log")):
            content = path.read_text(errors="replace")
            if "Traceback" in content:
                at = content.index("Traceback")
                found.append(f"{path}:\n{content[at : at + 3000]}")
        return found


@contextlib.contextmanager
def managed() -> Iterator[Processes]:
    """Processes that are stopped however the block ends (Ctrl-C included)."""
    processes = Processes()

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield processes
    finally:
        processes.stop(timeout=10)
        signal.signal(signal.SIGTERM, previous)


# The sandbox -------------------------------------------------------------------------


@dataclass
class Sandbox:
    url: str
    process: subprocess.Popen[Any]
    http: httpx.Client

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.http.request(method, f"{self.url}/_sandbox{path}", **kwargs)
        if response.status_code >= 300:
            raise BenchBroke(f"sandbox {method} {path}: {response.status_code} {response.text}")
        return response.json()

    def number(self, phone_number_id: str, webhook_url: str) -> None:
        self.call(
            "POST",
            "/numbers",
            json={
                "phone_number_id": phone_number_id,
                "token": SANDBOX_TOKEN,
                "app_secret": SANDBOX_SECRET,
                "webhook_url": webhook_url,
                "statuses": [],
                "rate_limit_mps": None,
            },
        )

    def accepted(self, phone_number_id: str) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = self.call(
            "GET", f"/numbers/{phone_number_id}/messages", timeout=120
        )["messages"]
        return messages


def start_sandbox(processes: Processes, env: dict[str, str]) -> Sandbox:
    process = processes.start(
        "sandbox",
        [sys.executable, "-m", "flask", "--app", "wsgi", "sandbox", "--port", "0"],
        env,
        stdout_pipe=True,
    )
    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        if not selector.select(timeout=30):
            raise BenchBroke(f"the sandbox did not start; see {processes.logs}/sandbox.log")
    line = process.stdout.readline().strip()
    prefix = "sandbox listening on "
    if not line.startswith(prefix):
        raise BenchBroke(f"the sandbox said {line!r}; see {processes.logs}/sandbox.log")
    return Sandbox(line.removeprefix(prefix), process, httpx.Client(timeout=30))


def create_identity(
    db: Any, sandbox: Sandbox, n: int, *, reply: float, campaign: float, total: float
) -> dict[str, Any]:
    """A tenant, a sandbox number and the identity sending through it, at these rates."""
    from app.clock import utcnow
    from app.crypto import SecretBox
    from app.repo.identities import create_identity as make
    from app.repo.tenants import create_tenant

    phone_number_id = f"777{n:09d}"
    sandbox.number(phone_number_id, "http://127.0.0.1:9/webhooks/whatsapp")
    now = utcnow()
    with db.transaction() as session:
        tenant, key = create_tenant(session, f"bench-{phone_number_id}", now)
        identity = make(
            session,
            SecretBox(SECRET_KEY),
            tenant_id=tenant.id,
            provider="whatsapp",
            account_id=phone_number_id,
            base_url=f"{sandbox.url}/v21.0",
            token=SANDBOX_TOKEN,
            app_secret=SANDBOX_SECRET,
            now=now,
            reply_rate=reply,
            campaign_rate=campaign,
            total_rate=total,
        )
        tenant_id, identity_id = tenant.id, identity.id
    return {
        "phone_number_id": phone_number_id,
        "identity_id": identity_id,
        "tenant_id": tenant_id,
        "api_key": key,
    }


def create_messages(
    db: Any, number: dict[str, Any], count: int, *, lane: str = "campaign", tag: int = 0
) -> list[int]:
    """`count` queued messages of one identity, in one transaction (not through the API)."""
    from app.clock import utcnow
    from app.repo.messages import NewMessage, create_message

    now = utcnow()
    ids = []
    with db.transaction() as session:
        for n in range(count):
            message, _ = create_message(
                session,
                NewMessage(
                    tenant_id=number["tenant_id"],
                    identity_id=number["identity_id"],
                    recipient=f"1{tag}{number['identity_id'] % 100:02d}{n:07d}",
                    lane=lane,
                    fingerprint=f"bench-{tag}-{n}".ljust(64, "f"),
                    body_text=f"bench {n}",
                ),
                now,
            )
            ids.append(message.id)
    return ids


def count_status(
    db: Any,
    ids: list[int] | None,
    statuses: tuple[str, ...],
    identity_ids: list[int] | None = None,
) -> int:
    """Messages in these states, among `ids` (a short list) or of these identities."""
    from sqlalchemy import func, select

    from app.models import Message

    query = select(func.count()).select_from(Message).where(Message.status.in_(statuses))
    if ids is not None:
        query = query.where(Message.id.in_(ids))
    if identity_ids is not None:
        query = query.where(Message.identity_id.in_(identity_ids))
    with db.transaction() as session:
        return int(session.scalar(query) or 0)


def status_counts(db: Any) -> dict[str, int]:
    from sqlalchemy import func, select

    from app.models import Message

    with db.transaction() as session:
        return {
            status: int(n)
            for status, n in session.execute(
                select(Message.status, func.count()).group_by(Message.status)
            )
        }


# CPU accounting ----------------------------------------------------------------------


def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """(comm, session id, utime + stime in ticks, parent pid) of a live process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm = raw[raw.index("(") + 1 : raw.rindex(")")]
    rest = raw[raw.rindex(")") + 2 :].split()
    # rest[0] is field 3 (state): ppid is field 4, session 6, utime 14, stime 15.
    return comm, int(rest[3]), int(rest[11]) + int(rest[12]), int(rest[1])


def _children_ticks(pid: int) -> int:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    rest = raw[raw.rindex(")") + 2 :].split()
    return int(rest[13]) + int(rest[14])  # fields 16 and 17: cutime, cstime


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def cpu_snapshot(groups: dict[str, list[int]]) -> dict[str, dict[int, int]]:
    """Ticks per live process for each group.

    A group named by session leaders (the processes this script started) holds every
    process of their sessions (RQ's scheduler child too). `postgres` is every postgres
    process serving the `bench` database plus the shared background processes (the
    checkpointer, WAL writer...), leaving out other databases' sessions. `redis` is the
    redis-server on port 6379 (shared by every database in it).
    """
    snapshot: dict[str, dict[int, int]] = {name: {} for name in groups}
    snapshot["postgres"] = {}
    snapshot["postgres: exited backends"] = {}
    snapshot["redis"] = {}
    sessions = {sid: name for name, sids in groups.items() for sid in sids}
    for pid in _pids():
        stat = _stat(pid)
        if stat is None:
            continue
        comm, sid, ticks, ppid = stat
        if comm == "postgres" and ppid == 1:
            # The postmaster reaps every backend: their CPU lands in its cutime + cstime
            # when they exit (every database's, not only `bench`'s).
            snapshot["postgres: exited backends"][pid] = _children_ticks(pid)
        if sid in sessions:
            snapshot[sessions[sid]][pid] = ticks
        elif comm == "postgres":
            command = _cmdline(pid)
            # Backends read "postgres: 15/main: user database host(port) state".
            parts = command.split()
            is_backend = len(parts) >= 5 and "(" in parts[4]
            if not is_backend or parts[3] == PG_DATABASE:
                snapshot["postgres"][pid] = ticks
        elif comm == "redis-server" and ":6379" in _cmdline(pid):
            snapshot["redis"][pid] = ticks
    return snapshot


def cpu_delta(
    before: dict[str, dict[int, int]], after: dict[str, dict[int, int]]
) -> dict[str, float]:
    """CPU seconds per group between two snapshots (a process born meanwhile from zero)."""
    return {
        name: sum(t - before.get(name, {}).get(pid, 0) for pid, t in pids.items()) / CLK_TCK
        for name, pids in after.items()
    }


def print_cpu(delta: dict[str, float], sends: int, self_seconds: float, unit: str = "send") -> None:
    rows = dict(delta)
    rows["bench driver (this process)"] = self_seconds
    total = sum(rows.values())
    print(f"  CPU per {unit}, over {sends} {unit}s (ms of utime+stime):")
    for name, seconds in rows.items():
        share = 100 * seconds / total if total else 0.0
        print(
            f"    {name:<28} {1000 * seconds / sends:7.3f} ms   ({seconds:6.2f} s, {share:4.1f}%)"
        )
    print(f"    {'total':<28} {1000 * total / sends:7.3f} ms   ({total:6.2f} s)")


def self_cpu() -> float:
    times = os.times()
    return times.user + times.system


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def wait_for(condition: Any, limit: float, every: float = 0.1, what: str = "") -> float:
    """Poll until true; returns when (monotonic). Raises BenchBroke past `limit`."""
    deadline = time.monotonic() + limit
    while True:
        if condition():
            return time.monotonic()
        if time.monotonic() > deadline:
            raise BenchBroke(f"gave up after {limit:.0f} s waiting for {what}")
        time.sleep(every)


def machine_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of every CPU since boot, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    total = sum(fields[:8])
    return total - idle, total


def print_machine(before: tuple[int, int], after: tuple[int, int], ours: float) -> None:
    """How busy the machine was over a phase, and how much of it was not this benchmark."""
    busy = (after[0] - before[0]) / CLK_TCK
    total = (after[1] - before[1]) / CLK_TCK
    cores = os.cpu_count() or 1
    wall = total / cores
    others = max(0.0, busy - ours)
    print(
        f"  machine: {100 * busy / total if total else 0:.0f}% busy over {wall:.1f} s; "
        f"other processes (not this benchmark's) used {others:.1f} CPU-s "
        f"= {others / wall if wall else 0:.2f} of {cores} cores"
    )


def checkout_pings() -> float:
    """Round trips made to check a pooled connection (`ratchet_db_pings`) in this process:
    not statements, so not in the statement counts."""
    from app import instruments

    return sum(
        sample.value
        for family in instruments.DB_PINGS.collect()
        for sample in family.samples
        if sample.name.endswith("_total")
    )
