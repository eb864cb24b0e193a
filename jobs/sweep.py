"""The sweeper: a database-driven loop, not an RQ job (it must survive a Redis flush).

Every pass (docs/design.md section 2):
0. end this installation's database sessions idle inside a transaction past the limit (a
   process stopped mid-transaction: its claims and locks roll back);
1. replay webhook statuses not yet applied (ones whose apply failed, and recently parked);
2. ring the drain of every identity and lane with something due (queued, retries whose
   time has come, expired leases, held messages whose identity is active again), skipping
   paused identities; ringing twice is harmless by design;
3. expire parked statuses no message matched within 7 days;
4. carry out a share of every running bulk plan (the backstop of its campaign-lane job),
   and delete bulk previews nobody confirmed within a day;
5. purge content past each tenant's retention, a batch at a time (`jobs/retention.py`);
6. ring the callback drain of every enabled endpoint with a status callback due (the
   safety net of the outbox: a lost ring, a Redis flush, a killed worker);
7. fold the charts' closed buckets, and the ones changes touched since, into their rollup
   (`app/repo/chart_rollup.py`), a few a pass.

Every `alert_interval` seconds the loop also evaluates the alerts (`jobs/alerts.py`), in a
step of its own: it reads only the database, so it runs whether Redis, the workers or the
database's writes are there or not.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import FrameType

from sqlalchemy.exc import SQLAlchemyError

from app.config import Config
from app.db import Database, end_stalled_sessions
from app.repo.bulkplans import PREVIEW_LIFETIME, expire_previews, running_plan_ids
from app.repo.callback_outbox import endpoints_with_due
from app.repo.chart_rollup import fold_charts
from app.repo.inbox import expire_parked, pending_status_ids
from app.repo.queue import due_drains
from app.repo.status_apply import apply_webhook_status
from jobs.alerts import AlertEvaluator
from jobs.bulk import run_plan
from jobs.callback_listener import CallbackListener
from jobs.callbacks import ring_endpoint
from jobs.queues import build_redis, get_redis
from jobs.registry import read_live_by_lane
from jobs.retention import SWEEPER, purge_content
from jobs.ringing import ring_identity

log = logging.getLogger(__name__)

# How long one pass spends on each running bulk plan (a chunk at least).
BULK_SHARE_SECONDS = 0.5


@dataclass(frozen=True, slots=True)
class Pass:
    rung: int
    ring_failed: int
    replayed: int
    still_pending: int
    expired: int
    bulk_plans: int = 0
    stalled_sessions: int = 0
    purged: int = 0
    callback_endpoints: int = 0
    # Not "anything" on its own: a busy system folds buckets every pass.
    chart_buckets: int = 0

    def describe(self) -> str:
        return (
            f"rang {self.rung} drains with messages due"
            + (f" ({self.ring_failed} could not reach Redis)" if self.ring_failed else "")
            + f", replayed {self.replayed} webhook statuses ({self.still_pending} still parked)"
            + f", expired {self.expired} parked statuses"
            + (f", worked on {self.bulk_plans} bulk plans" if self.bulk_plans else "")
            + (
                f", rang {self.callback_endpoints} callback endpoints"
                if self.callback_endpoints
                else ""
            )
            + (
                f", ended {self.stalled_sessions} database sessions stalled in a transaction"
                if self.stalled_sessions
                else ""
            )
            + (
                f", purged the content of {self.purged} messages and deliveries"
                if self.purged
                else ""
            )
            + (f", folded {self.chart_buckets} chart buckets" if self.chart_buckets else "")
        )

    @property
    def did_anything(self) -> bool:
        return bool(
            self.rung
            or self.ring_failed
            or self.replayed
            or self.expired
            or self.bulk_plans
            or self.stalled_sessions
            or self.purged
            or self.callback_endpoints
        )


def sweep_once(db: Database, config: Config, now: datetime) -> Pass:
    # 0. Sessions of ours stalled inside a transaction (a process stopped mid-claim holds
    #    the rows it claimed, unseen by every other drain, and its identity's share lock,
    #    which an operator's pause waits for): ended, so their work rolls back.
    try:
        with db.transaction() as session:
            stalled = end_stalled_sessions(session, config.db_idle_in_transaction)
    except SQLAlchemyError as exc:
        # Not allowed to read pg_stat_activity or end a session, say: the rest of the pass
        # still runs (the server's own timeout still applies).
        log.warning("could not look for stalled database sessions: %s", exc)
        stalled = []
    if stalled:
        log.warning(
            "ended %d database sessions idle in a transaction for over %g s (pids %s): "
            "their processes stopped mid-transaction; what they held rolls back",
            len(stalled),
            config.db_idle_in_transaction,
            ", ".join(map(str, stalled)),
        )
    # 1. Statuses first: a webhook that answered an unknown outcome must be applied before
    #    the retry it makes unnecessary is rung.
    with db.transaction() as session:
        pending = pending_status_ids(session, now, timedelta(seconds=config.parked_retry_window))
    replayed = still = 0
    for status_id in pending:
        try:
            with db.transaction() as session:
                result = apply_webhook_status(session, status_id, now)
        except Exception:
            log.exception("status %s failed to apply again; next pass retries it", status_id)
            still += 1
            continue
        if result == "parked":
            still += 1
        else:
            replayed += 1

    # 2. Ring the drain of every identity and lane with something due. A drain already
    #    pending or running is not rung twice (its key), only told to look again.
    with db.transaction() as session:
        due = due_drains(session, now)
    failed = [pair for pair in due if not ring_identity(pair[0], pair[1], config)]

    # 3. Parked statuses no message matched in 7 days: sends from other systems, normal.
    with db.transaction() as session:
        expired = expire_parked(session, now, timedelta(days=config.parked_max_age_days))

    # 4. Running bulk plans, a bounded share each pass: they survive a Redis flush and a
    #    restart because this pass, not only their job, carries them out.
    with db.transaction() as session:
        expire_previews(session, now - PREVIEW_LIFETIME)
        plans = running_plan_ids(session)
    for plan_id in plans:
        try:
            run_plan(db, config, plan_id, lambda: now, budget_seconds=BULK_SHARE_SECONDS)
        except Exception:
            log.exception("bulk plan %s: a chunk failed; the next pass tries again", plan_id)

    # 5. Retention: content past each tenant's days, in short batches within a share.
    purged = purge_content(db, now, cursor=SWEEPER)

    # 6. Status callbacks due: their drains rung (one pending or running per endpoint).
    with db.transaction() as session:
        endpoints = endpoints_with_due(session, now)
    unrung = [e for e in endpoints if not ring_endpoint(e, config)]

    # 7. The charts' rollup: read only by the charts, so a failure costs nothing else.
    try:
        with db.transaction() as session:
            charts = fold_charts(session, now)
        folded = charts.new + charts.again
    except SQLAlchemyError:
        log.exception("folding the charts failed; the next pass tries again")
        folded = 0
    return Pass(
        len(due) - len(failed),
        len(failed) + len(unrung),
        replayed,
        still,
        expired,
        len(plans),
        len(stalled),
        purged.messages + purged.deliveries,
        len(endpoints) - len(unrung),
        folded,
    )


def live_workers() -> Mapping[str, int] | None:
    """RQ's live workers per lane, for the stuck alert's cause (None: Redis unreachable)."""
    return read_live_by_lane(get_redis())


def run_sweeper(
    db: Database,
    config: Config,
    clock: Callable[[], datetime],
    *,
    once: bool = False,
    report: Callable[[str], None] = log.info,
    alerts: AlertEvaluator | None = None,
) -> int:
    """Sweep every `sweep_interval` seconds until SIGTERM or SIGINT; returns passes made."""
    stop = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        log.info("sweeper stopping (signal %s)", signum)
        stop.set()

    previous = {sig: signal.signal(sig, _stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    passes = 0
    evaluator = alerts if alerts is not None else AlertEvaluator(db, config, workers=live_workers)
    listener = None
    if db.engine.dialect.name == "postgresql":
        # Rings callback drains as changes commit; this loop's pass is the safety net.
        listener = CallbackListener(db.engine, config, build_redis(config.redis_url))
        listener.start()
    try:
        while not stop.is_set():
            now = clock()
            try:
                result = sweep_once(db, config, now)
                if result.did_anything or once:
                    report(f"sweep: {result.describe()}")
            except Exception:
                # The database may be down for a moment; the next pass tries again.
                log.exception("sweep pass failed")
            # Alerts in their own step: a sweep that failed (Redis down, writes refused)
            # is exactly when they must still be evaluated.
            if evaluator.is_due(now):
                try:
                    outcome = evaluator.run(now)
                    if outcome.fired or outcome.cleared or outcome.posted or once:
                        report(outcome.describe())
                except Exception:
                    log.exception("alert evaluation failed; next pass tries again")
            passes += 1
            if once:
                break
            stop.wait(config.sweep_interval)
    finally:
        if listener is not None:
            listener.stop()
            listener.join(timeout=5)
            listener.redis.close()
        if alerts is None:
            evaluator.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return passes
