"""PostgreSQL: `ratchet_abort(reason)`, which fails the statement that calls it.

The webhook's one-statement apply (`app/repo/webhook_sql_apply.py`) runs as a transaction of its
own, with no BEGIN and COMMIT around it; where it finds that what it did must not stand
(another applier finished the status first), it calls this, and PostgreSQL undoes the
whole statement. SQLite has no such statement and needs nothing.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# SQLSTATE class "RA" is no PostgreSQL class: only this function raises it.
CREATE = """
CREATE FUNCTION ratchet_abort(reason text) RETURNS integer
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION 'ratchet: %', reason USING ERRCODE = 'RA001';
END
$$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(CREATE)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION ratchet_abort(text)")
