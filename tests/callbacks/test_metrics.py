"""The callbacks' figures in `/metrics`: pending, the oldest pending change's age, and
failures by endpoint (the run in a row, and the POSTs counted by result)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flask import Flask
from prometheus_client.parser import text_string_to_metric_families

from app.db import Database
from app.metrics import scrape
from jobs.callbacks import deliver_due

from ..factories import World, make_world
from .conftest import BOX, add_endpoint, at, delivered_message, run_until_settled
from .receiver import Receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver().start()
    yield made
    made.stop()


def samples(db: Database, seconds: float) -> dict[tuple[str, str], float]:
    text = scrape(db, at(seconds), None).decode()
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("ratchet_callback"):
                key = sample.labels.get("result", "")
                found[(sample.name, key)] = sample.value
    return found


def test_the_scrape_shows_the_backlog_its_age_and_the_failures_of_an_endpoint(
    app: Flask, committed_db: Database, receiver: Receiver
) -> None:
    db = committed_db
    world: World = make_world(db)
    receiver.script = [500]
    endpoint_id = add_endpoint(db, world, receiver)
    delivered_message(db, world, "wamid.M1")  # changes at 1 s, 5 s and 6 s
    config = app.config["RATCHET"]
    deliver_due(db, BOX, config, endpoint_id, lambda: at(10))
    failing = samples(db, 31)
    assert failing[("ratchet_callbacks_pending", "")] == 3
    # Aged from when the oldest row was written (here: its first claim at 10 s, this test's
    # clock being behind the database's), not from the provider's time of the change.
    assert failing[("ratchet_callbacks_oldest_pending_age_seconds", "")] == 21
    assert failing[("ratchet_callback_endpoint_failures_in_row", "")] == 1
    assert failing[("ratchet_callback_posts_total", "failed")] >= 1
    run_until_settled(db, config, endpoint_id, at(31))
    settled = samples(db, 600)
    assert settled[("ratchet_callbacks_pending", "")] == 0
    assert settled[("ratchet_callbacks_oldest_pending_age_seconds", "")] == 0
    assert settled[("ratchet_callback_endpoint_failures_in_row", "")] == 0
    assert settled[("ratchet_callback_posts_total", "delivered")] >= 3
