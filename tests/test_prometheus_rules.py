"""The sample Prometheus rules in docs/ parse, and name only families and labels that
`/metrics` serves: the documentation cannot drift from the exposition."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from flask import Flask
from prometheus_client.parser import text_string_to_metric_families

from app.db import Database

from .conftest import METRICS_AUTH
from .factories import make_world

RULES = Path(__file__).resolve().parent.parent / "docs" / "prometheus" / "ratchet-rules.yml"


def test_the_sample_rules_name_only_what_metrics_serves(app: Flask, db: Database) -> None:
    make_world(db)
    text = app.test_client().get("/metrics", headers=METRICS_AUTH).get_data(as_text=True)
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
    rules = [
        rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]
    ]
    assert any("ratchet_queue_oldest_due_age_seconds" in rule["expr"] for rule in rules), (
        "no rule on the oldest due age"
    )
    for rule in rules:
        assert rule["alert"] and rule["annotations"]["summary"], rule
        names = re.findall(r"\bratchet_[a-z_]+", rule["expr"])
        assert names, rule
        for name in names:
            assert name in labels, f"{rule['alert']}: {name} is not served"
        for grouping in re.findall(r"by \(([^)]*)\)", rule["expr"]):
            wanted = {label.strip() for label in grouping.split(",")} - {"instance"}
            for name in names:
                assert wanted <= labels[name], f"{rule['alert']}: {name} lacks {wanted}"
