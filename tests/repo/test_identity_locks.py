"""An operator's action on a number (pause, resume, rates, validity) and the API's intake
for it never wait on each other: the action locks the identity `FOR NO KEY UPDATE`
(`scoped_identity`), and a message written for the identity takes only the key-share lock
of its foreign key. With `FOR UPDATE` each held the other up until it committed (found by
review). The claim's share lock still orders a pause against a claim
(`tests/repo/test_operator_action_races.py`)."""

from __future__ import annotations

from app.db import Database
from app.repo.identity_page import scoped_identity
from app.repo.identity_validity import set_default_validity

from ..factories import make_world, write_message
from .acceptance_steps import T1, impatient


def test_an_operators_action_and_the_apis_intake_for_the_number_do_not_wait_on_each_other(
    committed_db: Database,
) -> None:
    db = committed_db
    world = make_world(db)
    with db.transaction() as operator:  # an operator's action, not yet committed
        scoped_identity(operator, world.identity_id, None)
        with impatient(db) as api:
            assert write_message(api, world, recipient="15550000021", now=T1)
    with db.transaction() as api:  # a message accepted, not yet committed
        write_message(api, world, recipient="15550000022", now=T1)
        with impatient(db) as admin:
            scoped_identity(admin, world.identity_id, None)
            changed = set_default_validity(
                admin, world.identity_id, {"campaign": 3600}, actor="a@acme.test", now=T1, via="web"
            )
            assert changed == {"campaign": (None, 3600)}
