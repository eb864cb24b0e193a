"""The workers (`/workers`): every RQ worker on a Ratchet lane, from RQ's own registry in
Redis, and per lane whether anything works what is due. The overview shows the same lanes
as a strip (`lane_status`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from flask import render_template
from flask.typing import ResponseReturnValue
from redis.exceptions import RedisError

from app.auth import tenant_scope
from app.db import get_db
from app.repo.overview import IdentityLabel, LaneRow, overview
from app.views.pages import is_htmx, now, staff_blueprint, stuck_after
from jobs.queues import LANES, get_redis
from jobs.registry import WorkerInfo, list_workers, live_by_lane

bp = staff_blueprint("workers", __name__)


@dataclass(frozen=True, slots=True)
class LaneStatus:
    """One lane at a glance: its live workers (None: Redis could not be read) and what is
    due on it for the identities this person sees."""

    lane: str
    live: int | None
    due: int

    @property
    def is_unworked(self) -> bool:
        """Due messages and no live worker: nothing will send them until one starts."""
        return self.live == 0 and self.due > 0


@dataclass(frozen=True, slots=True)
class Workers:
    lanes: list[LaneStatus]
    workers: list[WorkerInfo]
    unreachable: bool
    # This process's wall clock, not `utcnow()`: RQ stamps heartbeats on each worker's own
    # wall clock, never on the database's.
    read_at: datetime


def read_workers(rows: list[LaneRow]) -> Workers:
    """The registry's workers beside the due counts of `rows` (the overview's rows)."""
    due = dict.fromkeys(LANES, 0)
    for row in rows:
        due[row.lane] += row.due
    try:
        workers = list_workers(get_redis())
    except RedisError:
        lanes = [LaneStatus(lane, None, due[lane]) for lane in LANES]
        return Workers(lanes, [], True, datetime.now(UTC))
    live = live_by_lane(workers)
    lanes = [LaneStatus(lane, live[lane], due[lane]) for lane in LANES]
    return Workers(lanes, workers, False, datetime.now(UTC))


def since(moment: datetime | None, wall: datetime) -> timedelta | None:
    return None if moment is None else max(timedelta(0), wall - moment)


@bp.get("/workers")
def index() -> ResponseReturnValue:
    moment = now()
    with get_db().transaction() as session:
        rows = overview(session, moment, stuck_after(), tenant_scope())
    labels: dict[int, IdentityLabel] = {row.identity.id: row.identity for row in rows}
    context = {"seen": read_workers(rows), "labels": labels, "since": since, "now": moment}
    template = "workers/_workers.html" if is_htmx() else "workers/index.html"
    return render_template(template, **context), 200, {"Vary": "HX-Request"}
