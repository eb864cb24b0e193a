"""A drain's batch of acceptances locks its message rows in the order of their ids, whatever
order the calls ended in, as the bulk runner and the template hold lock theirs; so the
three cannot deadlock (found by review: in the order given, a record and a template hold
did, with the plan PostgreSQL takes for a large table).

The test takes that plan (a nested loop over the given rows, each message found by its
key), hands the batch in the order the calls ended (the later message first), and holds
the later message's row: the record must already hold the earlier one while it waits."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from app.db import Database
from app.repo.accept_batch import accept_many
from app.repo.matching import lock_message_of_identity

from ..factories import make_world
from .acceptance_steps import T1, Runner, acceptance, claimed, wait_until_blocked


def test_a_batch_locks_its_messages_in_id_order_whatever_order_its_calls_ended(
    committed_db: Database,
) -> None:
    db = committed_db
    world = make_world(db)
    earlier, later = claimed(db, world, "15550000011"), claimed(db, world, "15550000012")
    assert earlier.message_id < later.message_id

    def record() -> set[tuple[int, int, int]]:
        with db.transaction() as drain:
            # A large table's plan: the given rows drive, each message found by its key.
            for setting in ("enable_hashjoin", "enable_mergejoin", "enable_seqscan"):
                drain.execute(text(f"SET LOCAL {setting} = off"))
            return accept_many(
                drain, [acceptance(later, "wamid.L"), acceptance(earlier, "wamid.E")], T1
            )

    runner = Runner()
    with db.transaction() as hold:  # a template hold, say, on the later message
        assert lock_message_of_identity(hold, later.message_id, world.identity_id)
        runner.start("record", record)
        wait_until_blocked(db)
        # The record waits for the later message: it must hold the earlier one already.
        with db.transaction() as probe, pytest.raises(OperationalError, match="could not obtain"):
            probe.execute(
                text("SELECT id FROM messages WHERE id = :id FOR NO KEY UPDATE NOWAIT"),
                {"id": earlier.message_id},
            )
    runner.join()
    assert {message_id for message_id, _, _ in runner.results["record"]} == {
        earlier.message_id,
        later.message_id,
    }
