"""Meta's account-level events: each WhatsApp identity's business account id, the events
kept verbatim with what Ratchet did (`provider_events`), and the template holds they put on
waiting messages (`template_holds`).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
ACTIVE = "released_at IS NULL"


def upgrade() -> None:
    with op.batch_alter_table("identities", schema=None) as batch_op:
        batch_op.add_column(sa.Column("business_account_id", sa.String(length=100), nullable=True))
        batch_op.create_index(
            "ix_identities_business_account_id", ["business_account_id"], unique=False
        )

    op.create_table(
        "provider_events",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("delivery_id", BIG_ID, nullable=False),
        sa.Column("provider", sa.String(length=20), nullable=False),
        sa.Column("business_account_id", sa.String(length=100), nullable=False),
        sa.Column("field", sa.String(length=100), nullable=False),
        sa.Column("event", sa.String(length=100), nullable=True),
        sa.Column("template_name", sa.String(length=512), nullable=True),
        sa.Column("template_language", sa.String(length=20), nullable=True),
        sa.Column("provider_time", sa.DateTime(timezone=True), nullable=True),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("value", sa.JSON(), nullable=False),
        sa.Column("action", sa.Text(), nullable=True),
        sa.Column("dedupe_key", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["delivery_id"],
            ["webhook_deliveries.id"],
            name="fk_provider_events_delivery_id_webhook_deliveries",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_provider_events"),
        sa.UniqueConstraint("dedupe_key", name="uq_provider_events_dedupe_key"),
    )
    with op.batch_alter_table("provider_events", schema=None) as batch_op:
        batch_op.create_index(
            "ix_provider_events_account", ["business_account_id", "id"], unique=False
        )

    op.create_table(
        "template_holds",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("business_account_id", sa.String(length=100), nullable=False),
        sa.Column("template_name", sa.String(length=512), nullable=False),
        sa.Column("template_language", sa.String(length=20), nullable=False),
        sa.Column("state", sa.String(length=30), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("event_id", BIG_ID, nullable=False),
        sa.Column("held_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("released_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["event_id"], ["provider_events.id"], name="fk_template_holds_event_id_provider_events"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_template_holds"),
    )
    with op.batch_alter_table("template_holds", schema=None) as batch_op:
        batch_op.create_index(
            "uq_template_holds_active",
            ["business_account_id", "template_name", "template_language"],
            unique=True,
            postgresql_where=sa.text(ACTIVE),
            sqlite_where=sa.text(ACTIVE),
        )


def downgrade() -> None:
    op.drop_table("template_holds")
    op.drop_table("provider_events")
    with op.batch_alter_table("identities", schema=None) as batch_op:
        batch_op.drop_index("ix_identities_business_account_id")
        batch_op.drop_column("business_account_id")
