"""`/metrics` carries the alerts firing, read from the evaluator's stored episodes at scrape
time: 0 for every kind while none fires, then the firing one with its identity and lane."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from flask import Flask
from prometheus_client.parser import text_string_to_metric_families

from app.db import Database
from jobs.alerts import AlertEvaluator

from ..conftest import METRICS_AUTH
from ..factories import make_message
from .dashboard_world import NOW, make_tenants


def scrape(app: Flask) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = app.test_client().get("/metrics", headers=METRICS_AUTH)
    assert response.status_code == 200
    samples = {}
    for family in text_string_to_metric_families(response.get_data(as_text=True)):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_the_alerts_firing_are_scraped_from_the_stored_episodes(app: Flask, db: Database) -> None:
    tenants = make_tenants(db)
    make_message(db, tenants.acme, lane="campaign", now=NOW - timedelta(minutes=5))
    before = scrape(app)
    for kind in ("stuck", "paused", "delivery_drop", "dwell", "dead_letters"):
        assert before[("ratchet_alerts_firing", (("kind", kind),))] == 0
    assert not [key for key in before if key[0] == "ratchet_alert_firing"]

    config = dataclasses.replace(app.config["RATCHET"], stuck_after=60.0)
    evaluator = AlertEvaluator(db, config)
    evaluator.run(NOW)
    evaluator.close()

    after = scrape(app)
    assert after[("ratchet_alerts_firing", (("kind", "stuck"),))] == 1
    assert after[("ratchet_alerts_firing", (("kind", "dwell"),))] == 0
    labels = (("identity", str(tenants.acme.identity_id)), ("kind", "stuck"), ("lane", "campaign"))
    assert after[("ratchet_alert_firing", labels)] == 1
