"""An alert reading and the small helpers every alert condition shares."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import case, func


@dataclass(frozen=True, slots=True)
class Reading:
    """One alert's condition now. `anchor` is when the trouble began where the data says
    it (the last claim, the pause), so an episode's id can be derived again after a
    restart; `firing` says whether the condition holds."""

    alert_key: str
    kind: str
    tenant_id: int
    identity_id: int | None
    lane: str | None
    firing: bool
    summary: str
    figures: dict[str, Any] = field(default_factory=dict)
    anchor: str = ""


def iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def seconds_of(delta: timedelta | None) -> float | None:
    return None if delta is None else round(delta.total_seconds(), 3)


def name_of(identity: Any) -> str:
    return f"{identity.provider} {identity.account_id} (identity {identity.id})"


def count_when(condition: Any) -> Any:
    return func.coalesce(func.sum(case((condition, 1), else_=0)), 0)
