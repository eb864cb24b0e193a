"""Security hardening: a session version per staff login, an atomic sign-in throttle, and
staff emails unique per tenant.

`staff.session_version`: every dashboard session carries the version its login had when it
signed in, and stops working once the version moves (sign-out, a password reset, disabling,
a role change).

`sign_in_throttles` replaces `sign_in_attempts`: counters per client address and per
account and address pair, locked and counted before a password is checked (the old rows
were counted, then written, and parallel guesses all got through). The old rows held only
the last day's attempts; the audit log keeps every sign-in.

`staff.email` is unique within a tenant and among platform staff (two indexes), no longer
across them: a tenant's admin was told when an address had a login elsewhere.

Revision ID: 0015
Revises: 0019
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0019"
branch_labels = None
depends_on = None


BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("staff", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("session_version", sa.Integer(), server_default="0", nullable=False)
        )
        batch_op.drop_constraint("uq_staff_email", type_="unique")
        batch_op.create_index("uq_staff_email_tenant", ["email", "tenant_id"], unique=True)
        batch_op.create_index(
            "uq_staff_email_platform",
            ["email"],
            unique=True,
            postgresql_where=sa.text("tenant_id IS NULL"),
            sqlite_where=sa.text("tenant_id IS NULL"),
        )
    op.create_table(
        "sign_in_throttles",
        sa.Column("id", BigId, nullable=False),
        sa.Column("key", sa.String(length=330), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("window_started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sign_in_throttles")),
        sa.UniqueConstraint("key", name=op.f("uq_sign_in_throttles_key")),
    )
    with op.batch_alter_table("sign_in_throttles", schema=None) as batch_op:
        batch_op.create_index("ix_sign_in_throttles_updated_at", ["updated_at"], unique=False)
    op.drop_table("sign_in_attempts")


def downgrade() -> None:
    op.create_table(
        "sign_in_attempts",
        sa.Column("id", BigId, nullable=False),
        sa.Column("email", sa.String(length=254), nullable=False),
        sa.Column("address", sa.String(length=64), nullable=False),
        sa.Column("succeeded", sa.Boolean(), nullable=False),
        sa.Column("attempted_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sign_in_attempts")),
    )
    with op.batch_alter_table("sign_in_attempts", schema=None) as batch_op:
        batch_op.create_index("ix_sign_in_attempts_email", ["email", "attempted_at"], unique=False)
        batch_op.create_index(
            "ix_sign_in_attempts_address", ["address", "attempted_at"], unique=False
        )
    op.drop_table("sign_in_throttles")
    with op.batch_alter_table("staff", schema=None) as batch_op:
        batch_op.drop_index("uq_staff_email_platform")
        batch_op.drop_index("uq_staff_email_tenant")
        # Fails if one email now has logins in several tenants: merge or rename them first.
        batch_op.create_unique_constraint("uq_staff_email", ["email"])
        batch_op.drop_column("session_version")
