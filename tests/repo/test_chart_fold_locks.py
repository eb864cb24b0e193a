"""The sweeper's chart fold never makes an operator wait: while a fold's transaction is
open, the dashboard's pause (which locks the identity for update) goes at once. The rollup
has no foreign key to `identities`, whose key-share locks would have held the identity
until the fold committed. (Found by review.)"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import text

from app.db import Database
from app.repo.chart_rollup import fold_charts
from app.repo.identity_page import scoped_identity

from ..conftest import T0
from ..factories import make_world
from ..views.dashboard_world import sent_message

NOW = T0 + timedelta(days=3, minutes=7)


def test_a_fold_in_progress_does_not_block_an_operators_pause(committed_db: Database) -> None:
    db = committed_db
    world = make_world(db)
    # A send 165 hours ago: in the oldest buckets of the week, folded by the first pass.
    minute = int((NOW - timedelta(hours=165) - T0).total_seconds() // 60)
    sent_message(db, world, "wamid.old", minute=minute)
    with db.transaction() as folding:
        folded = fold_charts(folding, NOW)  # the sweeper's step 7, not committed yet
        assert folded.new == 48
        with db.transaction() as operator:  # the dashboard's Pause on that identity
            # Past two seconds of waiting this fails the test with LockNotAvailable.
            operator.execute(text("SET LOCAL lock_timeout = '2s'"))
            assert scoped_identity(operator, world.identity_id, None) is not None
