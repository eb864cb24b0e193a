"""Alerts: stored episodes, the alert webhook's outbox, a stuck threshold per identity, and
the indexes the evaluator's questions need.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("identities", schema=None) as batch_op:
        batch_op.add_column(sa.Column("stuck_after", sa.Float(), nullable=True))
    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.create_index(
            "ix_messages_last_claim", ["identity_id", "lane", "last_attempt_at"], unique=False
        )
        batch_op.create_index(
            "ix_messages_identity_sent_at", ["identity_id", "sent_at"], unique=False
        )

    op.create_table(
        "alert_episodes",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("episode_key", sa.String(length=64), nullable=False),
        sa.Column("alert_key", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=30), nullable=False),
        sa.Column("tenant_id", BIG_ID, nullable=True),
        sa.Column("identity_id", BIG_ID, nullable=True),
        sa.Column("lane", sa.String(length=10), nullable=True),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("fired_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("fired_figures", sa.JSON(), nullable=False),
        sa.Column("cleared_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cleared_figures", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(
            ["tenant_id"], ["tenants.id"], name="fk_alert_episodes_tenant_id_tenants"
        ),
        sa.ForeignKeyConstraint(
            ["identity_id"], ["identities.id"], name="fk_alert_episodes_identity_id_identities"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_alert_episodes"),
        sa.UniqueConstraint("episode_key", name="uq_alert_episodes_episode_key"),
    )
    with op.batch_alter_table("alert_episodes", schema=None) as batch_op:
        batch_op.create_index(
            "uq_alert_episodes_open",
            ["alert_key"],
            unique=True,
            postgresql_where=sa.text("cleared_at IS NULL"),
            sqlite_where=sa.text("cleared_at IS NULL"),
        )
        batch_op.create_index("ix_alert_episodes_fired_at", ["fired_at"], unique=False)

    op.create_table(
        "alert_posts",
        sa.Column("id", BIG_ID, nullable=False),
        sa.Column("post_key", sa.String(length=80), nullable=False),
        sa.Column("episode_id", BIG_ID, nullable=False),
        sa.Column("transition", sa.String(length=10), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["episode_id"], ["alert_episodes.id"], name="fk_alert_posts_episode_id_alert_episodes"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_alert_posts"),
        sa.UniqueConstraint("post_key", name="uq_alert_posts_post_key"),
    )
    with op.batch_alter_table("alert_posts", schema=None) as batch_op:
        batch_op.create_index(
            "ix_alert_posts_due", ["delivered_at", "next_attempt_at"], unique=False
        )


def downgrade() -> None:
    op.drop_table("alert_posts")
    op.drop_table("alert_episodes")
    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.drop_index("ix_messages_identity_sent_at")
        batch_op.drop_index("ix_messages_last_claim")
    with op.batch_alter_table("identities", schema=None) as batch_op:
        batch_op.drop_column("stuck_after")
