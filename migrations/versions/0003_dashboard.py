"""The dashboard: audit rows carry their tenant; sign-in attempts for the throttle.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.add_column(sa.Column("tenant_id", BIG_ID, nullable=True))
        batch_op.create_foreign_key(
            "fk_audit_log_tenant_id_tenants", "tenants", ["tenant_id"], ["id"]
        )
        batch_op.create_index("ix_audit_log_tenant_target", ["tenant_id", "target"], unique=False)

    op.create_table(
        "sign_in_attempts",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("email", sa.String(length=254), nullable=False),
        sa.Column("address", sa.String(length=64), nullable=False),
        sa.Column("succeeded", sa.Boolean(), nullable=False),
        sa.Column("attempted_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_sign_in_attempts"),
    )
    with op.batch_alter_table("sign_in_attempts", schema=None) as batch_op:
        batch_op.create_index("ix_sign_in_attempts_email", ["email", "attempted_at"], unique=False)
        batch_op.create_index(
            "ix_sign_in_attempts_address", ["address", "attempted_at"], unique=False
        )


def downgrade() -> None:
    op.drop_table("sign_in_attempts")
    with op.batch_alter_table("audit_log", schema=None) as batch_op:
        batch_op.drop_index("ix_audit_log_tenant_target")
        batch_op.drop_constraint("fk_audit_log_tenant_id_tenants", type_="foreignkey")
        batch_op.drop_column("tenant_id")
