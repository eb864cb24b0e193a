"""What one drain in-process asks of PostgreSQL and Redis per message, counted, not timed
(step 4 of `bench/send_rate.py`)."""

from __future__ import annotations

import cProfile
import dataclasses
import threading
import time
from collections import Counter
from typing import Any

from sqlalchemy import text

from bench.common import (
    PG_DATABASE,
    REDIS_URL,
    BenchBroke,
    Sandbox,
    checkout_pings,
    count_status,
    create_identity,
    create_messages,
    self_cpu,
)


def commits(db: Any) -> int:
    """Transactions committed in the bench's database so far (PostgreSQL's own count,
    which reaches `pg_stat_database` within a second of each commit)."""
    with db.engine.connect() as connection:
        return int(
            connection.execute(
                text("SELECT xact_commit FROM pg_stat_database WHERE datname = :d"),
                {"d": PG_DATABASE},
            ).scalar_one()
        )


RATES = {"reply": 5000.0, "campaign": 5000.0, "total": 10000.0}
SQL_BATCH = 100


class Monitor:
    """Redis MONITOR, counting the commands sent to database 9 until a marker."""

    MARK = "bench-monitor-end"

    def __init__(self) -> None:
        from redis import Redis

        self.client = Redis.from_url(REDIS_URL)
        self.commands: Counter[str] = Counter()
        self.lua: Counter[str] = Counter()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.ready.wait(5)

    def _run(self) -> None:
        with self.client.monitor() as monitor:
            self.ready.set()
            for line in monitor.listen():
                raw = line.get("command", "")
                db = str(line.get("db", ""))
                if self.MARK in raw:
                    return
                if db != "9":
                    continue
                name = raw.split(" ", 1)[0].upper()
                if line.get("client_type") == "lua" or line.get("client_address") == "lua":
                    self.lua[name] += 1
                else:
                    self.commands[name] += 1

    def stop(self) -> None:
        from redis import Redis

        marker = Redis.from_url(REDIS_URL)
        marker.echo(self.MARK)
        marker.close()
        self.thread.join(10)
        self.client.close()


def count_one_drain(sandbox: Sandbox, app: Any, profile: bool) -> dict[str, Any]:
    """One drain in this process over SQL_BATCH messages of one identity: what it asks."""
    import redis.connection
    from sqlalchemy import event

    from app.crypto import get_box
    from app.db import get_db
    from jobs.drain import Drain
    from jobs.pacing import Pacer
    from jobs.queues import drain_keys, get_queue, get_redis
    from jobs.ringing import ring_identity

    db = get_db()
    # One drain over the whole lane: at these rates the lane has several shards, and a
    # drain of shard 0 alone sent about an eighth of the batch.
    config = dataclasses.replace(app.config["RATCHET"], shard_max=1)
    number = create_identity(db, sandbox, 99, **RATES)
    ids = create_messages(db, number, SQL_BATCH, tag=2)
    identity_id = number["identity_id"]
    redis_client = get_redis()
    if not ring_identity(identity_id, "campaign", config):
        raise BenchBroke("could not ring a drain: Redis unreachable")
    token = redis_client.get(drain_keys(identity_id, "campaign")[0])
    if token is None:
        raise BenchBroke("the drain's key was not set by its ring")
    get_queue("campaign").empty()  # this process runs the drain, not a worker
    pacer = Pacer(redis_client, config.pacing_burst, config.pacing_slowdown)
    drainer = Drain(db, get_box(), config, redis_client, pacer, identity_id, "campaign")

    statements: Counter[str] = Counter()
    transactions: Counter[str] = Counter()
    lock = threading.Lock()

    def on_execute(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        with lock:
            statements[statement.lstrip().split(None, 1)[0].upper()] += 1

    def on_tx(kind: str) -> Any:
        def listener(conn: Any, *args: Any) -> None:
            with lock:
                transactions[kind] += 1

        return listener

    listeners = [
        ("before_cursor_execute", on_execute),
        ("begin", on_tx("BEGIN")),
        ("commit", on_tx("COMMIT")),
        ("rollback", on_tx("ROLLBACK")),
    ]
    pool_listeners = [("connect", on_tx("connect")), ("close", on_tx("close"))]
    round_trips = Counter[str]()
    original_send = redis.connection.Connection.send_packed_command

    def counting_send(self: Any, command: Any, check_health: bool = True) -> Any:
        round_trips["sent"] += 1
        return original_send(self, command, check_health)

    monitor = Monitor()
    for name, listener in listeners:
        event.listen(db.engine, name, listener)
    for name, listener in pool_listeners:
        event.listen(db.engine.pool, name, listener)
    redis.connection.Connection.send_packed_command = counting_send  # type: ignore[method-assign]
    profiler = cProfile.Profile() if profile else None
    thread_profiles: list[cProfile.Profile] = []
    if profile:
        # cProfile sees one thread; the drain's provider calls and records run in a pool.
        send = drainer._send

        def profiled_send(prepared: Any) -> Any:
            mine = cProfile.Profile()
            try:
                return mine.runcall(send, prepared)
            finally:
                with lock:
                    thread_profiles.append(mine)

        drainer._send = profiled_send  # type: ignore[method-assign]
    pings_before = checkout_pings()
    cpu_before, wall_before = self_cpu(), time.monotonic()
    try:
        if profiler is not None:
            profiler.enable()
        summary = drainer.run(token.decode() if isinstance(token, bytes) else str(token))
    finally:
        if profiler is not None:
            profiler.disable()
        cpu_spent, wall_spent = self_cpu() - cpu_before, time.monotonic() - wall_before
        transactions["ping"] = int(checkout_pings() - pings_before)
        redis.connection.Connection.send_packed_command = original_send  # type: ignore[method-assign]
        for name, listener in listeners:
            event.remove(db.engine, name, listener)
        for name, listener in pool_listeners:
            event.remove(db.engine.pool, name, listener)
        monitor.stop()
    get_queue("campaign").empty()
    sent = count_status(db, ids, ("sent",))
    if sent != len(ids):
        raise BenchBroke(f"the in-process drain sent {sent} of {len(ids)}: {summary}")
    return {
        "summary": summary,
        "statements": statements,
        "transactions": transactions,
        "redis": monitor.commands,
        "lua": monitor.lua,
        "round_trips": round_trips["sent"],
        "messages": len(ids),
        "cpu": cpu_spent,
        "wall": wall_spent,
        "profile": profiler,
        "thread_profiles": thread_profiles,
    }
