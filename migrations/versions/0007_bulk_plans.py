"""Bulk plans: a bulk requeue or cancel kept in the database with the ids it previewed.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "bulk_plans",
        sa.Column("id", BigId, nullable=False),
        sa.Column("kind", sa.String(length=10), nullable=False),
        sa.Column("tenant_id", BigId, nullable=True),
        sa.Column("status", sa.String(length=10), nullable=False),
        sa.Column("filters", sa.JSON(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("previewed_by", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("confirmed_by", sa.String(length=200), nullable=True),
        sa.Column("confirmed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("canceled_by", sa.String(length=200), nullable=True),
        sa.Column("canceled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("planned", sa.Integer(), nullable=False),
        sa.Column("done", sa.Integer(), nullable=False),
        sa.Column("skipped_changed", sa.Integer(), nullable=False),
        sa.Column("skipped_held", sa.Integer(), nullable=False),
        sa.Column("skipped_already", sa.Integer(), nullable=False),
        sa.Column("skipped_claimed", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name=op.f("fk_bulk_plans_tenant_id_tenants")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_bulk_plans")),
    )
    op.create_index("ix_bulk_plans_status", "bulk_plans", ["status", "id"], unique=False)
    op.create_table(
        "bulk_plan_items",
        sa.Column("plan_id", BigId, nullable=False),
        sa.Column("message_id", BigId, nullable=False),
        sa.Column("cycle", sa.Integer(), nullable=False),
        sa.Column("group_key", sa.String(length=60), nullable=False),
        sa.Column("held", sa.Text(), nullable=True),
        sa.Column("selected", sa.Boolean(), nullable=False),
        sa.Column("outcome", sa.String(length=10), nullable=True),
        sa.Column("done_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["message_id"], ["messages.id"], name=op.f("fk_bulk_plan_items_message_id_messages")
        ),
        sa.ForeignKeyConstraint(
            ["plan_id"], ["bulk_plans.id"], name=op.f("fk_bulk_plan_items_plan_id_bulk_plans")
        ),
        sa.PrimaryKeyConstraint("plan_id", "message_id", name=op.f("pk_bulk_plan_items")),
    )
    op.create_index("ix_bulk_plan_items_message", "bulk_plan_items", ["message_id"], unique=False)
    op.create_index(
        "ix_bulk_plan_items_pending",
        "bulk_plan_items",
        ["plan_id", "selected", "outcome"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index("ix_bulk_plan_items_pending", table_name="bulk_plan_items")
    op.drop_index("ix_bulk_plan_items_message", table_name="bulk_plan_items")
    op.drop_table("bulk_plan_items")
    op.drop_index("ix_bulk_plans_status", table_name="bulk_plans")
    op.drop_table("bulk_plans")
