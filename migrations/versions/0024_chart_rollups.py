"""The charts' rollup (issue 36): `chart_rollups`, one identity's figures per closed bucket
of 15 minutes and of an hour, and `chart_fold_marks`, how far the sweeper has folded them.

The day's and the week's charts aggregated every message of their window on each request
(1.2 s for the week at a million messages); they now read these rows for the closed buckets
and aggregate only the still-open tail. Both tables start empty: the sweeper fills the last
week a few buckets a pass, and until it has, the charts aggregate what is not folded yet,
as before. Nothing on the send or webhook path writes them.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "chart_rollups",
        sa.Column("width", sa.Integer(), nullable=False),
        sa.Column(
            "identity_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False
        ),
        sa.Column("bucket", sa.Integer(), nullable=False),
        sa.Column("sent", sa.Integer(), nullable=False),
        sa.Column("sent_delivered", sa.Integer(), nullable=False),
        sa.Column("longest_wait", sa.Float(), nullable=True),
        sa.Column("delivered", sa.Integer(), nullable=False),
        sa.Column("read", sa.Integer(), nullable=False),
        sa.Column("failed", sa.Integer(), nullable=False),
        sa.Column("failed_unsent", sa.Integer(), nullable=False),
        sa.Column("arrivals", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("width", "identity_id", "bucket", name="pk_chart_rollups"),
    )
    op.create_table(
        "chart_fold_marks",
        sa.Column("width", sa.Integer(), nullable=False),
        sa.Column("folded_from", sa.Integer(), nullable=False),
        sa.Column("folded_to", sa.Integer(), nullable=False),
        sa.Column("changes_seen_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("width", name="pk_chart_fold_marks"),
    )


def downgrade() -> None:
    op.drop_table("chart_fold_marks")
    op.drop_table("chart_rollups")
