"""An endpoint's rate: no more POSTs start in any one second than it allows, and a drain
held back by it still delivers everything (on its own clock: the times are passed in)."""

from __future__ import annotations

from flask import Flask

from app.callback_models import DELIVERED
from app.db import Database
from jobs.callbacks import Pace, deliver_due

from ..factories import make_world
from .conftest import BOX, add_endpoint, at, delivered_message, outbox, with_config
from .receiver import Receiver


def test_the_window_allows_the_rate_per_second_and_frees_as_it_slides() -> None:
    pace = Pace(3)
    assert pace.free(10.0) == 3
    pace.took(10.0, 2)
    pace.took(10.4, 1)
    assert pace.free(10.5) == 0 and pace.wait(10.5) == 0.5
    assert pace.free(11.0) == 2  # the two of 10.0 have left the window
    assert pace.free(11.4) == 3
    assert Pace(0).free(0.0) > 1000  # no limit


def test_a_paced_drain_still_delivers_every_callback(app: Flask, committed_db: Database) -> None:
    db = committed_db
    world = make_world(db)
    receiver = Receiver().start()
    try:
        endpoint_id = add_endpoint(db, world, receiver)
        for n in range(3):
            delivered_message(db, world, f"wamid.Q{n}")  # 9 callbacks
        deliver_due(db, BOX, with_config(app, callback_rate=4), endpoint_id, lambda: at(10))
    finally:
        receiver.stop()
    assert {row.state for row in outbox(db)} == {DELIVERED}
    assert len(receiver.applied) == 9
