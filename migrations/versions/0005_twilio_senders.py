"""One Twilio account has many senders: a Twilio identity is (Account SID, From).

The one unique constraint on (provider, account_id) becomes two partial unique indexes:
(provider, account_id) for every provider but Twilio, and (provider, account_id, sender)
for Twilio (DESIGN section 11).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

NOT_TWILIO = sa.text("provider <> 'twilio'")
TWILIO = sa.text("provider = 'twilio'")


def upgrade() -> None:
    with op.batch_alter_table("identities", schema=None) as batch_op:
        batch_op.drop_constraint("uq_identities_provider_account_id", type_="unique")
        batch_op.create_index(
            "uq_identities_provider_account_id",
            ["provider", "account_id"],
            unique=True,
            postgresql_where=NOT_TWILIO,
            sqlite_where=NOT_TWILIO,
        )
        batch_op.create_index(
            "uq_identities_twilio_account_id_sender",
            ["provider", "account_id", "sender"],
            unique=True,
            postgresql_where=TWILIO,
            sqlite_where=TWILIO,
        )


def downgrade() -> None:
    with op.batch_alter_table("identities", schema=None) as batch_op:
        batch_op.drop_index("uq_identities_twilio_account_id_sender")
        batch_op.drop_index("uq_identities_provider_account_id")
        batch_op.create_unique_constraint(
            "uq_identities_provider_account_id", ["provider", "account_id"]
        )
