"""The scrape behind `GET /metrics`: database gauges read now, plus the processes' counters.

1. The database families: each is one small function `(session, now) -> metrics`, listed in
   `DATABASE_FAMILIES` and run in one read-only transaction per scrape. Every host's web
   answers the same for them (they are the database's state, not the process's): across
   hosts, aggregate them with `max`, never `sum`. Another family is one more function
   appended to that list.
2. `ratchet_database_up`: 0 when that transaction failed, so a scrape still answers (with the
   counters) while the database is away, and says so.
3. The per-process counters (`app/instruments.py`): merged from the multiprocess directory
   when this process runs in prometheus-client's multiprocess mode, else this process's own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from app import instruments
from app.db import Database
from app.repo.alert_signals import KINDS as ALERT_KINDS
from app.repo.alerts import firing_alerts
from app.repo.callback_outbox import backlogs
from app.repo.metrics import identity_labels, lane_queues, messages_by_state

log = logging.getLogger(__name__)

Family = Callable[[Session, datetime], Iterable[Metric]]

LANE_LABELS = ["identity", "tenant", "provider", "lane"]


def queue_families(session: Session, now: datetime) -> Iterable[Metric]:
    """Per identity and lane: the oldest due age (the stuck-queue signal), the depth, the
    attempts in flight and the retries waiting; and each identity's pause."""
    identities = identity_labels(session)
    oldest = GaugeMetricFamily(
        "ratchet_queue_oldest_due_age_seconds",
        "Age of the oldest due message (queued, or past its retry time or lease; not one "
        "scheduled for later), 0 when nothing is due. The stuck-queue signal.",
        labels=LANE_LABELS,
    )
    depth = GaugeMetricFamily(
        "ratchet_queue_depth",
        "Messages due now (claimable if the identity is active).",
        labels=LANE_LABELS,
    )
    in_flight = GaugeMetricFamily(
        "ratchet_queue_in_flight", "Attempts leased to a worker now.", labels=LANE_LABELS
    )
    retry = GaugeMetricFamily(
        "ratchet_queue_retry_waiting",
        "Messages waiting for a retry scheduled later.",
        labels=LANE_LABELS,
    )
    for queue in lane_queues(session, now, identities):
        labels = [
            str(queue.identity.id),
            queue.identity.tenant,
            queue.identity.provider,
            queue.lane,
        ]
        oldest.add_metric(labels, queue.oldest_due_age(now))
        depth.add_metric(labels, queue.due)
        in_flight.add_metric(labels, queue.in_flight)
        retry.add_metric(labels, queue.retry_waiting)
    paused = GaugeMetricFamily(
        "ratchet_identity_paused",
        "1 while the identity is paused (by a person or a broken-sender answer).",
        labels=["identity", "tenant", "provider"],
    )
    for identity in identities:
        paused.add_metric(
            [str(identity.id), identity.tenant, identity.provider], 1 if identity.paused else 0
        )
    return [oldest, depth, in_flight, retry, paused]


def message_families(session: Session, now: datetime) -> Iterable[Metric]:
    """How many messages are in each state, per identity and lane."""
    del now  # a count of what is, whenever it is read
    messages = GaugeMetricFamily(
        "ratchet_messages",
        "Messages by state (queued, sending, sent, delivered, read, failed).",
        labels=["identity", "lane", "state"],
    )
    for identity_id, lane, state, count in messages_by_state(session):
        messages.add_metric([str(identity_id), lane, state], count)
    return [messages]


def alert_families(session: Session, now: datetime) -> Iterable[Metric]:
    """The alerts firing now (open episodes, as the evaluator last stored them): one series
    per kind, 0 included, and one per firing alert with what it is about."""
    del now  # the evaluator decides when an alert fires; this reads what it stored
    firing = firing_alerts(session)
    by_kind = GaugeMetricFamily(
        "ratchet_alerts_firing",
        "Alerts firing now, by kind (stuck, paused, delivery_drop, dwell, dead_letters, "
        "template_held).",
        labels=["kind"],
    )
    for kind in ALERT_KINDS:
        by_kind.add_metric([kind], sum(1 for alert in firing if alert.kind == kind))
    each = GaugeMetricFamily(
        "ratchet_alert_firing",
        "1 for each alert firing now, labelled with its kind, identity and lane.",
        labels=["kind", "identity", "lane"],
    )
    for alert in firing:
        identity = "" if alert.identity_id is None else str(alert.identity_id)
        each.add_metric([alert.kind, identity, alert.lane or ""], 1)
    return [by_kind, each]


def callback_families(session: Session, now: datetime) -> Iterable[Metric]:
    """Per callback endpoint: what waits to be posted, how old its oldest change is, and
    its current run of failures (0 after any 2xx)."""
    labels = ["endpoint", "tenant"]
    pending = GaugeMetricFamily(
        "ratchet_callbacks_pending",
        "Status callbacks not yet taken by the receiver (due, or waiting for a retry).",
        labels=labels,
    )
    oldest = GaugeMetricFamily(
        "ratchet_callbacks_oldest_pending_age_seconds",
        "Age of the change behind the oldest pending callback, 0 when none is pending.",
        labels=labels,
    )
    failing = GaugeMetricFamily(
        "ratchet_callback_endpoint_failures_in_row",
        "POSTs to the endpoint that failed in a row since its last 2xx.",
        labels=labels,
    )
    enabled = GaugeMetricFamily(
        "ratchet_callback_endpoint_enabled",
        "1 while the endpoint is enabled; 0 once disabled (by a 410, a run of failures, or "
        "its tenant).",
        labels=labels,
    )
    for backlog in backlogs(session):
        names = [str(backlog.endpoint_id), backlog.tenant]
        pending.add_metric(names, backlog.pending)
        age = 0.0 if backlog.oldest is None else (now - backlog.oldest).total_seconds()
        oldest.add_metric(names, max(age, 0.0))
        failing.add_metric(names, backlog.failures_in_row)
        enabled.add_metric(names, 1 if backlog.enabled else 0)
    return [pending, oldest, failing, enabled]


# The database families of a scrape, in order.
DATABASE_FAMILIES: list[Family] = [
    queue_families,
    message_families,
    alert_families,
    callback_families,
]


class DatabaseCollector(Collector):
    def __init__(self, db: Database, now: datetime, families: list[Family]) -> None:
        self.db, self.now, self.families = db, now, families

    def collect(self) -> Iterator[Metric]:
        found: list[Metric] = []
        up = 1
        try:
            with self.db.transaction() as session:
                for family in self.families:
                    found.extend(family(session, self.now))
        except SQLAlchemyError as exc:
            log.warning("metrics: the database did not answer: %s", exc.__class__.__name__)
            found, up = [], 0
        yield from found
        yield GaugeMetricFamily(
            "ratchet_database_up",
            "1 if this scrape read the queue gauges from the database, 0 if it could not.",
            value=up,
        )


def scrape(db: Database, now: datetime, multiprocess_dir: str | None) -> bytes:
    """The whole exposition, in Prometheus's text format."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(db, now, DATABASE_FAMILIES))
    if multiprocess_dir:
        MultiProcessCollector(registry, path=multiprocess_dir)
    else:
        registry.register(instruments.process_collector())
    return generate_latest(registry)
