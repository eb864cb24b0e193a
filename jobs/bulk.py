"""Running confirmed bulk plans: a campaign-lane RQ job rung on confirmation, and the
sweeper's pass as the backstop (a Redis flush or a restart loses the job, never the plan:
the plan and its progress live in the database).

Never the reply lane: a bulk requeue of thousands must not stand in front of a reply.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime

from flask import current_app

from app.config import Config
from app.db import Database, get_db
from app.repo.bulkrun import CHUNK, run_chunk
from jobs.queues import ring

log = logging.getLogger(__name__)

# One job keeps its worker this long, then rings itself to the back of the queue.
JOB_SLICE_SECONDS = 5.0
LANE = "campaign"


def run_plan(
    db: Database,
    config: Config,
    plan_id: int,
    clock: Callable[[], datetime],
    *,
    budget_seconds: float,
    chunk: int = CHUNK,
    monotonic: Callable[[], float] = time.monotonic,
) -> bool:
    """Carry out chunks of the plan until it is finished (True) or the budget is spent."""
    # Imported here: the drains import the sending modules, which need the app set up.
    from jobs.ringing import ring_identity

    started = monotonic()
    while True:
        with db.transaction() as session:
            result = run_chunk(session, plan_id, clock(), limit=chunk)
        # Committed: only now make the requeued messages' drains look (a lost ring is
        # re-rung by the sweeper, which finds them due).
        for identity_id, lane in sorted(result.to_ring):
            ring_identity(identity_id, lane, config)
        if result.finished:
            return True
        if monotonic() - started >= budget_seconds:
            return False


def run_bulk_plan(plan_id: int) -> str:
    """The RQ job (campaign lane): work the plan for a slice, then ring itself again."""
    from app.clock import utcnow

    config: Config = current_app.config["RATCHET"]
    finished = run_plan(get_db(), config, plan_id, utcnow, budget_seconds=JOB_SLICE_SECONDS)
    if finished:
        return f"bulk plan {plan_id}: finished"
    ring_plan(plan_id)
    return f"bulk plan {plan_id}: slice spent, rung again"


def ring_plan(plan_id: int) -> bool:
    """Start (or continue) a plan on the campaign lane; False if Redis is down (the
    sweeper carries it out then)."""
    return ring(run_bulk_plan, LANE, plan_id)
