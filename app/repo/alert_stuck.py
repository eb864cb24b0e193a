"""The stuck alert per identity and lane (docs/alerts.md): the oldest due message is older
than the threshold AND the lane made no claim for the threshold. A paced backlog claims
every slot: quiet. A paused identity (or campaign lane) does not fire it: the pause is the
one cause, and its own alert. Its summary names the cause where it is known: no live worker
on the lane in RQ's registry (read by the caller, passed in), or live ones that claim
nothing."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from app.config import Config
from app.lifecycle import Status
from app.models import Identity, Message
from app.repo.alert_reading import Reading, count_when, iso, name_of, seconds_of
from app.repo.claimable import is_due
from app.repo.overview import LANES, due_since


def stuck_cause(lane: str, live: int | None) -> str:
    """Why nothing claims, as far as the workers' registry tells."""
    if live is None:
        return "is a worker running for this lane? (the workers' registry could not be read)"
    if live == 0:
        return f"no live worker on the {lane} lane: start one (see Workers)"
    return (
        f"{live} live worker{'' if live == 1 else 's'} on the {lane} lane claimed nothing: "
        "busy elsewhere or frozen? (see Workers)"
    )


def read_stuck(
    session: Session,
    config: Config,
    now: datetime,
    identities: list[Any],
    live_workers: Mapping[str, int] | None = None,
) -> list[Reading]:
    waiting = {
        (row.identity_id, row.lane): row
        for row in session.execute(
            select(
                Message.identity_id,
                Message.lane,
                count_when(is_due(now)).label("due"),
                func.min(case((is_due(now), due_since(now)))).label("oldest"),
            )
            .where(Message.status.in_([Status.QUEUED.value, Status.SENDING.value]))
            .group_by(Message.identity_id, Message.lane)
        )
    }

    # Progress is a claim: every claim stamps `last_attempt_at`. One newest-claim lookup
    # per identity and lane, each a short backward scan of ix_messages_last_claim.
    def newest_claim(lane: str) -> Any:
        return (
            select(func.max(Message.last_attempt_at))
            .where(Message.identity_id == Identity.id, Message.lane == lane)
            .scalar_subquery()
        )

    claims: dict[tuple[int, str], datetime | None] = {}
    for row in session.execute(
        select(Identity.id, *(newest_claim(lane).label(lane) for lane in LANES))
    ):
        for lane in LANES:
            claims[(row.id, lane)] = getattr(row, lane)
    readings = []
    for identity in identities:
        threshold = timedelta(
            seconds=identity.stuck_after if identity.stuck_after is not None else config.stuck_after
        )
        for lane in LANES:
            found = waiting.get((identity.id, lane))
            due = int(found.due) if found is not None else 0
            oldest = found.oldest if found is not None else None
            age = None if oldest is None else max(timedelta(0), now - oldest)
            last_claim = claims.get((identity.id, lane))
            idle = None if last_claim is None else max(timedelta(0), now - last_claim)
            paused = identity.paused_at is not None
            held = paused or (lane == "campaign" and identity.campaign_paused_at is not None)
            # One alert per cause: a paused identity is the paused alert's (and a paused
            # campaign lane an operator's choice, shown as PAUSED), not a stuck queue too.
            firing = (
                not held
                and age is not None
                and age > threshold
                and (idle is None or idle > threshold)
            )
            live = None if live_workers is None else live_workers.get(lane, 0)
            why = stuck_cause(lane, live)
            summary = (
                f"{name_of(identity)}, {lane} lane: {due} due, the oldest waiting "
                f"{int(age.total_seconds()) if age else 0} s; "
                + (
                    f"no claim for {int(idle.total_seconds())} s"
                    if idle is not None
                    else "never claimed"
                )
                + (f" ({why})" if firing else "")
            )
            readings.append(
                Reading(
                    alert_key=f"stuck:{identity.id}:{lane}",
                    kind="stuck",
                    tenant_id=identity.tenant_id,
                    identity_id=identity.id,
                    lane=lane,
                    firing=firing,
                    summary=summary,
                    figures={
                        "due": due,
                        "oldest_due_age_seconds": seconds_of(age),
                        "seconds_since_last_claim": seconds_of(idle),
                        "last_claim_at": iso(last_claim),
                        "threshold_seconds": threshold.total_seconds(),
                        "identity_paused": paused,
                        "live_workers": live,
                    },
                    # While a lane is stuck nothing claims, so its last claim stands still.
                    anchor=iso(last_claim) or "never claimed",
                )
            )
    return readings
