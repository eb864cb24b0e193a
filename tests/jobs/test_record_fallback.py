"""A batch of records that fails is recorded one call at a time, and one record that fails
alone loses no other (found by an outside review of issue 30).

Before the fix the one-at-a-time loop re-raised on the first record that failed: the calls
after it, accepted at the provider, stayed `sending`, their leases lapsed into unknown
outcomes, and a message the provider had accepted was sent again."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis import Redis
from rq.timeouts import JobTimeoutException
from sqlalchemy import text

from jobs.call import record_batch
from jobs.drain import Drain
from jobs.pacing import Pacer

from .conftest import Env
from .drain_runs import called_batch


@pytest.fixture
def poisoned(env: Env) -> Iterator[list[int]]:
    """A trigger that refuses the first of a holder's ids, once filled, as it becomes `sent`."""
    poison: list[int] = []
    with env.db.transaction() as session:
        session.execute(
            text("""
            CREATE TABLE IF NOT EXISTS fallback_poison (id bigint PRIMARY KEY);
            CREATE OR REPLACE FUNCTION fallback_poison() RETURNS trigger AS $$
            BEGIN
              IF NEW.status = 'sent' AND EXISTS (SELECT 1 FROM fallback_poison WHERE id = NEW.id)
              THEN RAISE EXCEPTION 'a record refused'; END IF;
              RETURN NEW;
            END $$ LANGUAGE plpgsql;
            DROP TRIGGER IF EXISTS fallback_poison ON messages;
            CREATE TRIGGER fallback_poison BEFORE UPDATE ON messages
              FOR EACH ROW EXECUTE FUNCTION fallback_poison();""")
        )
    try:
        yield poison
    finally:
        with env.db.transaction() as session:
            session.execute(
                text(
                    "DROP TRIGGER IF EXISTS fallback_poison ON messages; DROP TABLE fallback_poison"
                )
            )


def poison(env: Env, message_id: int) -> None:
    with env.db.transaction() as session:
        session.execute(text("INSERT INTO fallback_poison VALUES (:id)"), {"id": message_id})


def test_one_record_that_fails_loses_no_other(env: Env, poisoned: list[int]) -> None:
    number = env.number(statuses=[], rate_limit_mps=None)
    ids = [env.send(number, f"155573000{n:02d}", lane="campaign") for n in range(4)]
    poison(env, ids[1])  # in the middle: the calls after it were lost
    calls = called_batch(env, number["identity_id"])

    recorded = record_batch(env.db, env.config, calls, env.clock)

    assert len(env.accepted(number)) == 4
    assert {env.message(i).status for i in (ids[0], ids[2], ids[3])} == {"sent"}
    assert sorted(c.prepared.claim.message_id for c, _, _ in recorded) == [ids[0], *ids[2:]]
    assert env.message(ids[1]).status == "sending"  # its lease lapses: an unknown outcome


def test_when_no_record_can_be_made_the_error_escapes(env: Env, poisoned: list[int]) -> None:
    number = env.number(statuses=[], rate_limit_mps=None)
    ids = [env.send(number, f"155573001{n:02d}", lane="campaign") for n in range(2)]
    for message_id in ids:
        poison(env, message_id)
    calls = called_batch(env, number["identity_id"])

    with pytest.raises(Exception, match="a record refused"):
        record_batch(env.db, env.config, calls, env.clock)


def test_a_job_timeout_during_a_record_leaves_the_batch_to_the_abandon_path(env: Env) -> None:
    """RQ's job timeout lands while a batch is being recorded, before its commit: the drain
    ending records that batch (`_abandon`), instead of leaving its leases to lapse."""
    number = env.number(statuses=[], rate_limit_mps=None)
    ids = [env.send(number, f"155573002{n:02d}", lane="campaign") for n in range(2)]
    calls = called_batch(env, number["identity_id"])
    timed_out: list[bool] = []

    def clock_cut_once():  # type: ignore[no-untyped-def]
        # Read inside the record's transaction: the job's time runs out there, once.
        if not timed_out:
            timed_out.append(True)
            raise JobTimeoutException("the job's time is up")
        return env.clock()

    redis: Redis = env.app.extensions["ratchet.redis"]
    drain = Drain(
        env.db, env.box, env.config, redis, Pacer(redis), number["identity_id"], "campaign"
    )
    drain.clock = clock_cut_once
    with pytest.raises(JobTimeoutException):
        drain._record(calls)
    assert {env.message(i).status for i in ids} == {"sending"}  # rolled back

    drain._abandon("the drain was cut short: JobTimeoutException")

    assert {env.message(i).status for i in ids} == {"sent"}
