"""An identity's default validity per lane (app/validity.py): read at intake, set by admins
from the dashboard's identities page or the CLI (`identity validity`). A change is one
UPDATE and one audit row naming each lane's value before and after, in the caller's
transaction; a bad value raises `ValidityError` before anything is written.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from app.models import Identity
from app.repo.staff import record_audit
from app.validity import LANES, ValidityError, check_validity

COLUMNS = {"reply": "reply_valid_for", "campaign": "campaign_valid_for"}


def lane_default(identity: Identity, lane: str) -> int | None:
    """The identity's default validity for this lane, in seconds (None: no limit)."""
    value: int | None = getattr(identity, COLUMNS[lane])
    return value


def set_default_validity(
    session: Session,
    identity_id: int,
    wanted: dict[str, int | None],
    *,
    actor: str,
    now: datetime,
    via: str,
) -> dict[str, tuple[int | None, int | None]]:
    """Set the lanes given in `wanted` (seconds, None: no limit); the others keep theirs.
    Returns what changed, lane -> (before, after); empty when nothing did (no audit row).
    Raises `ValidityError` for an unknown lane or a value out of bounds, `LookupError` for
    no such identity."""
    for lane, seconds in wanted.items():
        if lane not in LANES:
            raise ValidityError(f"unknown lane {lane!r}; the lanes are {', '.join(LANES)}")
        check_validity(seconds)
    identity = session.scalars(
        select(Identity)
        .where(Identity.id == identity_id)
        .with_for_update(key_share=True)  # `scoped_identity` says why
        .execution_options(populate_existing=True)
    ).one_or_none()
    if identity is None:
        raise LookupError(identity_id)
    changed = {
        lane: (lane_default(identity, lane), seconds)
        for lane, seconds in wanted.items()
        if lane_default(identity, lane) != seconds
    }
    if not changed:
        return {}
    session.execute(
        update(Identity)
        .where(Identity.id == identity_id)
        .values({COLUMNS[lane]: after for lane, (_, after) in changed.items()})
    )
    record_audit(
        session,
        actor,
        "identity.default_validity",
        f"identity:{identity_id}",
        now,
        {
            # Seconds per lane (None: no limit); the audit page words them.
            "validity": {
                lane: {"before": before, "after": after}
                for lane, (before, after) in changed.items()
            },
            "via": via,
        },
        tenant_id=identity.tenant_id,
    )
    return changed
