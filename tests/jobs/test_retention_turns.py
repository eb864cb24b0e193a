"""The purge's share and turns (found by review): a pass keeps to its share even when its
turns find nothing to purge, and with the sweeper's cursor every turn comes round in its
order, so a tenant with many identities does not slow another tenant's purge."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, select

from app.crypto import SecretBox
from app.db import Database
from app.models import Message
from app.repo.identities import create_identity
from jobs.retention import Cursor, purge_content

from ..conftest import SECRET_KEY, T0
from ..factories import World, make_world
from ..sql_verbs import executions
from ..views.dashboard_world import failed_message
from .retention_world import ERROR, LATER


def more_identities(db: Database, world: World, count: int, prefix: str) -> None:
    """`count` more identities of the tenant, with nothing to purge."""
    with db.transaction() as session:
        for n in range(count):
            create_identity(
                session,
                SecretBox(SECRET_KEY),
                tenant_id=world.tenant_id,
                provider="whatsapp",
                account_id=f"{prefix}{n:05d}",
                base_url="http://127.0.0.1:9",
                token="t" * 20,
                app_secret="s",
                verify_token="v",
                business_account_id=None,
                now=T0,
            )


def test_a_pass_with_nothing_due_keeps_to_its_share_on_a_slow_host(db: Database) -> None:
    world = make_world(db)
    more_identities(db, world, 60, "90")
    clock = [0.0]

    def slow_host() -> float:  # each reading a second later: every query takes a second
        clock[0] += 1.0
        return clock[0]

    with executions(db) as ran:
        purged = purge_content(db, LATER, budget_seconds=0.25, timer=slow_host)
    assert purged.messages == purged.deliveries == purged.callbacks == 0
    # The turns' list (two reads) and the one turn a pass always runs; before the fix,
    # every one of the 63 turns ran (196 statements).
    assert len(ran) <= 15, ran


def test_two_equal_backlogs_move_at_equal_speeds_whatever_their_identities(
    db: Database,
) -> None:
    """Tenant A has 20 identities (nothing due for them), tenant B one; both have 30
    messages to purge. A slow host: each pass runs only the one batch it always runs."""
    a = make_world(db, name="many-identities", account_id="3000001")
    more_identities(db, a, 19, "7")
    b = make_world(db, name="one-identity", account_id="3000002")
    for minute in range(30):
        failed_message(db, a, error=ERROR, minute=minute)
        failed_message(db, b, error=ERROR, minute=minute)
    cursor = Cursor()  # as the sweeper keeps one across its passes
    for n in range(3 * 27):  # three rounds of the 27 turns
        purge_content(
            db, LATER + timedelta(seconds=2 * n), batch=1, budget_seconds=0, cursor=cursor
        )
    with db.transaction() as session:
        done = dict(
            session.execute(
                select(Message.tenant_id, func.count())
                .where(Message.content_purged_at.is_not(None))
                .group_by(Message.tenant_id)
            ).all()
        )
    # One batch each a round (before the fix, a turn's share followed the empty turns
    # before it: 4 against 22 in 26 passes).
    mine, theirs = done.get(a.tenant_id, 0), done.get(b.tenant_id, 0)
    assert mine >= 2 and theirs >= 2 and abs(mine - theirs) <= 1, done
