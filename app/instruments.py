"""The per-process counters and histograms of `/metrics` (prometheus-client).

Each process counts what it did itself: the worker its sends and pacing waits, the web the
webhooks it received. Two ways to read them:

- one process (tests, a single web process): `process_collector()` reads these objects;
- several processes (`make run`, gunicorn's workers, RQ workers on many machines): every
  process started with `PROMETHEUS_MULTIPROC_DIR` set writes its values to files in that
  directory (prometheus-client's multiprocess mode, chosen by the library when it is first
  imported), and the web's scrape merges the directory's files. One directory per host, so
  these counters are per host: Prometheus scrapes each host's web and sums them.

The queue and message gauges are not here: they are read from the database at scrape time
(`app/metrics.py`), the same on every host.

The objects are created with `registry=None`: importing this module registers nothing.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import Counter, Histogram
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

# A provider call ends by its deadline (RATCHET_PROVIDER_TIMEOUT, 10 s by default).
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

SENDS = Counter(
    "ratchet_sends",
    "Provider calls by what the provider answered: outcome accepted or failed, and the "
    "failure class of a failed one (none when accepted).",
    ["provider", "lane", "outcome", "failure_class"],
    registry=None,
)
PROVIDER_LATENCY = Histogram(
    "ratchet_provider_latency_seconds",
    "How long one provider call took, from the request to the whole answer (or the failure).",
    ["provider"],
    buckets=LATENCY_BUCKETS,
    registry=None,
)
WEBHOOKS_RECEIVED = Counter(
    "ratchet_webhooks_received",
    "Webhook deliveries POSTed to /webhooks/<provider>, whatever became of them.",
    ["provider"],
    registry=None,
)
WEBHOOKS_REJECTED = Counter(
    "ratchet_webhooks_rejected",
    "Webhook deliveries refused: too_large (413), malformed (400), unverified (401: no known "
    "identity named, or a bad signature).",
    ["provider", "reason"],
    registry=None,
)
WEBHOOK_STATUSES = Counter(
    "ratchet_webhook_statuses",
    "Statuses in signed webhook deliveries by what became of them: applied, duplicate (seen "
    "before), refused (would move a message backwards), parked (its message not known yet), "
    "stale, ignored, unmatched (under a number we do not know), unapplied (left for the "
    "sweeper), unstorable.",
    ["provider", "result"],
    registry=None,
)
LATE_FAILURES = Counter(
    "ratchet_late_failures",
    "A provider's `failed` for a message it had already reported delivered or read: refused "
    "by the guard (statuses only move forward), shown on the message's page and ticket.",
    ["provider"],
    registry=None,
)
PACING_WAITS = Counter(
    "ratchet_pacing_waits",
    "Times a drain found no pacing slot free and waited (never an attempt).",
    ["lane"],
    registry=None,
)
PACING_WAIT_SECONDS = Counter(
    "ratchet_pacing_wait_seconds",
    "How long those pacing waits were, summed.",
    ["lane"],
    registry=None,
)
DB_PINGS = Counter(
    "ratchet_db_pings",
    "Round trips made to check a pooled PostgreSQL connection before use: only for one idle "
    "for a while (the others have only their socket looked at).",
    registry=None,
)
DB_REPLACED = Counter(
    "ratchet_db_connections_replaced",
    "Pooled PostgreSQL connections found dead at checkout and replaced before use: hung_up "
    "(the server had closed it: a restart, a failover, a terminated session) or no_answer "
    "(idle, and its ping failed: a network path dropped it).",
    ["reason"],
    registry=None,
)
CALLBACK_POSTS = Counter(
    "ratchet_callback_posts",
    "Status callback POSTs by endpoint and result: delivered (2xx), failed (any other "
    "answer, a timeout, a refused connection or address).",
    ["endpoint", "result"],
    registry=None,
)

ALL = (
    SENDS,
    PROVIDER_LATENCY,
    WEBHOOKS_RECEIVED,
    WEBHOOKS_REJECTED,
    WEBHOOK_STATUSES,
    LATE_FAILURES,
    PACING_WAITS,
    PACING_WAIT_SECONDS,
    DB_PINGS,
    DB_REPLACED,
    CALLBACK_POSTS,
)


class _ProcessCollector(Collector):
    """This process's own values, for a scrape outside multiprocess mode."""

    def collect(self) -> Iterator[Metric]:
        for instrument in ALL:
            yield from instrument.collect()


def process_collector() -> Collector:
    return _ProcessCollector()
