"""The bulk actions' tables: a previewed plan and its items (`app/repo/bulkplans.py`).

Kept apart from `app/models.py`, whose Base they share; `migrations/env.py` and the test
fixtures import this module too, so the metadata always holds these tables.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.models import Base, BigId


class BulkPlan(Base):
    """A bulk requeue or cancel: previewed, confirmed, then carried out in chunks.

    The plan's items are the ids exactly as previewed, so what it touches is what its
    preview counted; it lives here, not in Redis, so a flush or a restart loses nothing.
    """

    __tablename__ = "bulk_plans"
    __table_args__ = (Index("ix_bulk_plans_status", "status", "id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    kind: Mapped[str] = mapped_column(String(10))  # requeue | cancel
    # The tenant whose messages it touches (None: platform staff across every tenant).
    tenant_id: Mapped[int | None] = mapped_column(ForeignKey("tenants.id"))
    # previewed -> running -> done, or stopped (before or while running).
    status: Mapped[str] = mapped_column(String(10))
    filters: Mapped[dict[str, Any]]
    reason: Mapped[str | None] = mapped_column(Text)
    previewed_by: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime]
    confirmed_by: Mapped[str | None] = mapped_column(String(200))
    confirmed_at: Mapped[datetime | None]
    canceled_by: Mapped[str | None] = mapped_column(String(200))
    canceled_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    # Set at confirmation: how many items the plan will touch (the preview's count).
    planned: Mapped[int] = mapped_column(Integer, default=0)
    # Kept with each chunk, in its transaction: done + skipped always add up.
    done: Mapped[int] = mapped_column(Integer, default=0)
    skipped_changed: Mapped[int] = mapped_column(Integer, default=0)
    skipped_held: Mapped[int] = mapped_column(Integer, default=0)
    skipped_already: Mapped[int] = mapped_column(Integer, default=0)
    skipped_claimed: Mapped[int] = mapped_column(Integer, default=0)


class BulkPlanItem(Base):
    """One message of a plan, as the preview saw it, and what the plan did to it."""

    __tablename__ = "bulk_plan_items"
    __table_args__ = (
        Index("ix_bulk_plan_items_message", "message_id"),
        Index("ix_bulk_plan_items_pending", "plan_id", "selected", "outcome"),
    )

    plan_id: Mapped[int] = mapped_column(ForeignKey("bulk_plans.id"), primary_key=True)
    message_id: Mapped[int] = mapped_column(ForeignKey("messages.id"), primary_key=True)
    cycle: Mapped[int] = mapped_column(Integer)
    # The preview's breakdown: "<class>:<code>" for a requeue, "<identity>:<lane>" for a cancel.
    group_key: Mapped[str] = mapped_column(String(60))
    # Why the provider may hold a deliverable copy (listed apart, never selected), or None.
    held: Mapped[str | None] = mapped_column(Text)
    selected: Mapped[bool] = mapped_column(Boolean, default=False)
    # None until touched: requeued, canceled, changed, held, already, claimed.
    outcome: Mapped[str | None] = mapped_column(String(10))
    done_at: Mapped[datetime | None]
