"""A drain's reads are built once with bound parameters (`claimable_bound`,
`app/repo/claimable.py`); they must pick exactly the rows the predicate built with values
(`claimable`) picks, whatever the instant, the shard and the conversations' state."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select, update

from app.db import Database
from app.models import Message
from app.repo.claimable import claim_parameters, claimable, claimable_bound
from app.repo.claims import claim_batch
from app.shards import WHOLE, Shard, shard_key_of

from ..conftest import T0
from ..factories import make_message, make_world

HOLD = timedelta(seconds=60)
LEASE = timedelta(seconds=25)


def _ids(db: Database, where: tuple[object, ...], values: dict[str, object] | None) -> list[int]:
    with db.transaction() as session:
        query = select(Message.id).where(*where).order_by(Message.id)  # type: ignore[arg-type]
        return list(session.scalars(query, values or {}))


def _at_key(key: int) -> str:
    """A recipient whose shard key is `key`."""
    return next(r for n in range(100_000) if shard_key_of(r := f"1555{n:07d}") == key)


def test_the_bound_predicate_picks_what_the_predicate_with_values_picks(db: Database) -> None:
    world = make_world(db)
    # Recipients on each edge of the four shards' key ranges, and some anywhere.
    edges = {edge for index in range(4) for edge in Shard(index, 4).key_range()} - {1024}
    people = [_at_key(key) for key in sorted(edges | {edge - 1 for edge in edges if edge})]
    people += [f"155577{n:05d}" for n in range(12)]
    for n, person in enumerate(people):  # one to three messages each
        for part in range(1 + n % 3):
            make_message(db, world, recipient=person, text=f"part {part}")
    # One person's first message in flight (its next held), one scheduled for later.
    with db.transaction() as session:
        claims = claim_batch(session, world.identity_id, "campaign", 1, T0, LEASE)
        claim = claims[0]
        session.execute(
            update(Message)
            .where(Message.id == claim.message_id + 5)
            .values(not_before=T0 + timedelta(minutes=5))
        )

    # Three people whose first message waits for a retry an hour away, first claimed 1, 2
    # and 3 minutes after their messages were accepted: at T0 + 210 s (the hold reaching
    # back to T0 + 150 s) the first two are past the hold and the third still holds.
    retrying = [f"155588{n:05d}" for n in range(3)]
    firsts = []
    for person in retrying:
        firsts.append(make_message(db, world, recipient=person, text="first"))
        make_message(db, world, recipient=person, text="second")
    with db.transaction() as session:
        for minutes, first in enumerate(firsts, start=1):
            session.execute(
                update(Message)
                .where(Message.id == first)
                .values(
                    status="sending",
                    attempt=1,
                    sending_at=T0 + timedelta(minutes=minutes),
                    next_attempt_at=T0 + timedelta(hours=1),
                )
            )

    seen = set()
    instants = (T0, T0 + timedelta(seconds=30), T0 + timedelta(seconds=210))
    for at in (*instants, T0 + timedelta(minutes=10)):
        for shard in (WHOLE, *(Shard(index, 4) for index in range(4))):
            literal = _ids(db, claimable(world.identity_id, "campaign", at, HOLD, shard), None)
            values = claim_parameters(world.identity_id, "campaign", at, HOLD, shard)
            bound = _ids(db, claimable_bound(not shard.is_whole), values)
            assert bound == literal, (at, shard)
            seen.add((shard, len(literal)))
    # The cases differ from one another: the comparison is not of empty sets.
    assert len({count for _, count in seen}) > 2, seen
    at = T0 + timedelta(seconds=210)
    values = claim_parameters(world.identity_id, "campaign", at, HOLD, WHOLE)
    past_the_hold = set(_ids(db, claimable_bound(False), values)) - set(firsts)
    with db.transaction() as session:
        seconds = dict(
            session.execute(
                select(Message.recipient, Message.id).where(
                    Message.recipient.in_(retrying), Message.id.not_in(firsts)
                )
            ).all()
        )
    assert [seconds[p] in past_the_hold for p in retrying] == [True, True, False]
    assert claim.message_id not in _ids(
        db, claimable_bound(False), claim_parameters(world.identity_id, "campaign", T0, HOLD, WHOLE)
    )
