"""What became of the messages a bulk requeue requeued: their states now, and how many of
them failed again since, so its page does not stop at "Done: 14 requeued" while all 14
came back as dead letters fifteen seconds later."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.lifecycle import Status
from app.models import Message
from app.models_operations import BulkPlanItem
from app.repo.bulkrun import REQUEUED


@dataclass(frozen=True, slots=True)
class Aftermath:
    requeued: int
    by_status: dict[str, int]  # the requeued messages' states now

    @property
    def failed_again(self) -> int:
        return self.by_status.get(Status.FAILED.value, 0)

    @property
    def waiting(self) -> int:
        return sum(self.by_status.get(s.value, 0) for s in (Status.QUEUED, Status.SENDING))

    @property
    def through(self) -> int:
        """Sent, delivered or read: the provider took them this time."""
        return sum(
            self.by_status.get(s.value, 0) for s in (Status.SENT, Status.DELIVERED, Status.READ)
        )


def plan_aftermath(session: Session, plan_id: int) -> Aftermath:
    rows = session.execute(
        select(Message.status, func.count())
        .join(BulkPlanItem, BulkPlanItem.message_id == Message.id)
        .where(BulkPlanItem.plan_id == plan_id, BulkPlanItem.outcome == REQUEUED)
        .group_by(Message.status)
    ).all()
    by_status = {status: int(count) for status, count in rows}
    return Aftermath(sum(by_status.values()), by_status)
