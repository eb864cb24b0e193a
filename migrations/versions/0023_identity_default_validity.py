"""A default validity per identity and lane (issue 34): `reply_valid_for` and
`campaign_valid_for` on identities, seconds, nullable (null: no limit). A message whose
request gives neither `valid_for` nor `expires_at` gets its `expires_at` from them.

Follows 0022 (the recipient shards).

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable with no default: on PostgreSQL adding them rewrites nothing and locks briefly.
    op.add_column("identities", sa.Column("reply_valid_for", sa.Integer(), nullable=True))
    op.add_column("identities", sa.Column("campaign_valid_for", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("identities", "campaign_valid_for")
    op.drop_column("identities", "reply_valid_for")
