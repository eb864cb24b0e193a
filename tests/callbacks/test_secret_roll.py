"""Rolling the signing secret: while the overlap lasts both secrets sign (a receiver still
holding the old one verifies), after it only the new one does."""

from __future__ import annotations

from datetime import timedelta

from flask import Flask

from app.db import Database
from app.repo.callback_endpoints import get_endpoint, roll_secret
from app.repo.callback_outbox import replay_callback
from jobs.callbacks import deliver_due

from ..factories import make_world
from .conftest import BOX, add_endpoint, at, delivered_message, run_until_settled
from .receiver import Receiver


def test_both_secrets_sign_during_the_overlap_and_only_the_new_one_after(
    app: Flask, committed_db: Database
) -> None:
    db = committed_db
    config = app.config["RATCHET"]
    world = make_world(db)
    receiver = Receiver().start()
    try:
        endpoint_id = add_endpoint(db, world, receiver)  # the receiver holds this secret
        with db.transaction() as session:
            endpoint = get_endpoint(session, world.tenant_id, endpoint_id)
            assert endpoint is not None
            new = roll_secret(session, BOX, endpoint, at(0), timedelta(hours=1))
        delivered_message(db, world, "wamid.S1")
        run_until_settled(db, config, endpoint_id, at(10))  # inside the overlap
        assert [seen.verified for seen in receiver.seen] == [True] * 3
        assert all(len(seen.signature.split(" ")) == 2 for seen in receiver.seen)

        delivered_message(db, world, "wamid.S2")
        deliver_due(db, BOX, config, endpoint_id, lambda: at(2 * 3600))  # the overlap is over
        later = receiver.seen[3:]
        assert len(later) == 3 and not any(seen.verified for seen in later)
        assert all(len(seen.signature.split(" ")) == 1 for seen in later)
        receiver.secret = new  # the receiver switched: the next one verifies
        with db.transaction() as session:
            assert replay_callback(session, None, int(later[0].webhook_id[3:]), at(3 * 3600))
        deliver_due(db, BOX, config, endpoint_id, lambda: at(3 * 3600))
        assert receiver.seen[-1].verified
    finally:
        receiver.stop()
