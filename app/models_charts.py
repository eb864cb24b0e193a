"""The charts' rollup (`app/repo/chart_rollup.py`): what the day's and the week's charts read
for their closed buckets instead of aggregating every message of the window again.

On `app/models.py`'s metadata; migration 0024 creates exactly these.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Float, Integer
from sqlalchemy.orm import Mapped, mapped_column

from app.dbtypes import Base, BigId


class ChartRollup(Base):
    """One identity's figures in one closed bucket of `width` seconds. Absent: all zero.

    Each figure is what the live aggregate of `app/repo/chart_sql.py` gives for that identity
    and bucket; a fold replaces the row, never adds to it."""

    __tablename__ = "chart_rollups"

    width: Mapped[int] = mapped_column(Integer, primary_key=True)  # seconds: 900 or 3600
    # No foreign key, on purpose: each row the fold inserted would hold a key-share lock on
    # its identity until the fold commits, and an operator's pause or rate change, which
    # locks the identity for update, would wait for the fold. Identities are never deleted.
    identity_id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=False)
    bucket: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    sent: Mapped[int] = mapped_column(Integer)
    sent_delivered: Mapped[int] = mapped_column(Integer)  # of those sends, delivered or read
    longest_wait: Mapped[float | None] = mapped_column(Float)  # seconds, queued to sent
    delivered: Mapped[int] = mapped_column(Integer)
    read: Mapped[int] = mapped_column(Integer)
    failed: Mapped[int] = mapped_column(Integer)
    failed_unsent: Mapped[int] = mapped_column(Integer)  # failed without being sent
    arrivals: Mapped[int] = mapped_column(Integer)  # queued in the bucket


class ChartFoldMark(Base):
    """How far the rollup of one width has got: buckets `folded_from <= b < folded_to` are
    folded, and the changes received before `changes_seen_at` are folded in."""

    __tablename__ = "chart_fold_marks"

    width: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    folded_from: Mapped[int] = mapped_column(Integer)
    folded_to: Mapped[int] = mapped_column(Integer)
    changes_seen_at: Mapped[datetime | None]
