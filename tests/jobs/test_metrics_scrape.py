"""`/metrics` after real sends through the sandbox and real signed webhooks: the exposition
parses with prometheus-client's own parser, every family carries its labels, the counters
moved by what happened, and the queue gauges say what the database holds."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from redis import Redis
from rq import Queue, SimpleWorker

from app.clock import utcnow
from app.models import Identity
from app.repo.identities import update_identity
from app.repo.messages import NewMessage, create_message
from jobs.queues import queue_name

from ..conftest import METRICS_AUTH
from .conftest import Env
from .scrape import Scrape

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "whatsapp"
LANE_LABELS = {"identity", "tenant", "provider", "lane"}


def scrape(env: Env) -> Scrape:
    response = env.http.get(f"{env.base_url}/metrics", headers=METRICS_AUTH)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return Scrape(response.text)


def test_the_scrape_after_real_sends_and_webhooks_carries_every_family_and_its_counts(
    env: Env,
) -> None:
    number = env.number(duplicate_webhooks=True)
    identity = str(number["identity_id"])
    slow = env.number()
    with env.db.transaction() as session:
        # One campaign slot every 10 s: its third message waits for a pacing slot, longer
        # than a drain waits inline, so the drain rings itself for later.
        update_identity(
            session, env.box, slow["identity_id"], campaign_rate=0.1, total_rate=30, now=utcnow()
        )
    before = scrape(env)

    # Two accepted, one permanent failure (131026), one unknown outcome (503 / 131016): the
    # drain alone on the queue, so it waits for its slots inline and sends all four. Then
    # two accepted before the slow identity's pacing wait.
    for to in ("15551230001", "15551230002", "15550000005", "15550000003"):
        env.send(number, to)
    work_the_campaign_lane(env)
    for to in ("15551230011", "15551230012", "15551230013"):
        env.send(slow, to)
    work_the_campaign_lane(env)
    env.settle(number)
    env.settle(slow)

    # Three deliveries refused: over 1 MiB, not JSON, and one naming our number with a bad
    # signature.
    too_large = b"{" + b" " * (1024 * 1024) + b"}"
    url = f"{env.base_url}/webhooks/whatsapp"
    assert env.http.post(url, content=too_large).status_code == 413
    assert env.http.post(url, content=b"{not json").status_code == 400
    forged = json.loads((FIXTURES / "status_sent.json").read_text())
    forged["entry"][0]["changes"][0]["value"]["metadata"]["phone_number_id"] = number[
        "phone_number_id"
    ]
    refused = env.http.post(
        f"{env.base_url}/webhooks/whatsapp",
        json=forged,
        headers={"X-Hub-Signature-256": "sha256=" + "0" * 64},
    )
    assert refused.status_code == 401

    # A message due for two minutes that nobody rang: the stuck-queue signal.
    with env.db.transaction() as session:
        create_message(
            session,
            NewMessage(
                tenant_id=_tenant_of(env, number),
                identity_id=number["identity_id"],
                recipient="15551239999",
                lane="campaign",
                fingerprint=hashlib.sha256(b"stuck").hexdigest(),
                body_text="waiting",
            ),
            utcnow() - timedelta(minutes=2),
        )
    after = scrape(env)

    def moved(sample: str, **labels: str) -> float:
        return after.value(sample, **labels) - before.value(sample, **labels)

    whatsapp = {"provider": "whatsapp", "lane": "campaign"}
    assert moved("ratchet_sends_total", outcome="accepted", failure_class="none", **whatsapp) == 4
    assert moved("ratchet_sends_total", outcome="failed", failure_class="permanent") == 1
    assert moved("ratchet_sends_total", outcome="failed", failure_class="unknown") == 1
    assert moved("ratchet_provider_latency_seconds_count", provider="whatsapp") == 6
    assert after.labels_of("ratchet_provider_latency_seconds") == {"provider"}
    assert moved("ratchet_pacing_waits_total", lane="campaign") >= 1
    assert moved("ratchet_pacing_wait_seconds_total", lane="campaign") > 0
    received = sum(
        len(env.sandbox("GET", f"/webhooks?phone_number_id={n['phone_number_id']}")["webhooks"])
        for n in (number, slow)
    )
    assert received > 0
    assert moved("ratchet_webhooks_received_total", provider="whatsapp") == received + 3
    assert moved("ratchet_webhooks_rejected_total", reason="too_large") == 1
    assert moved("ratchet_webhooks_rejected_total", reason="malformed") == 1
    assert moved("ratchet_webhooks_rejected_total", reason="unverified") == 1
    assert moved("ratchet_webhook_statuses_total", result="applied") >= 4
    assert moved("ratchet_webhook_statuses_total", result="duplicate") >= 4  # each posted twice

    for family in (
        "ratchet_queue_oldest_due_age_seconds",
        "ratchet_queue_depth",
        "ratchet_queue_in_flight",
        "ratchet_queue_retry_waiting",
    ):
        assert after.labels_of(family) == LANE_LABELS, family
    mine = {"identity": identity, "tenant": f"tenant-{number['phone_number_id']}"}
    assert after.value("ratchet_queue_oldest_due_age_seconds", lane="campaign", **mine) >= 119
    assert after.value("ratchet_queue_oldest_due_age_seconds", lane="reply", **mine) == 0
    assert after.value("ratchet_queue_depth", lane="campaign", **mine) == 1
    assert after.value("ratchet_queue_retry_waiting", lane="campaign", **mine) == 1  # the 503s
    assert after.value("ratchet_identity_paused", identity=identity) == 0
    assert after.labels_of("ratchet_messages") == {"identity", "lane", "state"}
    states: dict[str, Any] = {
        s.labels["state"]: s.value
        for s in after.families["ratchet_messages"].samples
        if s.labels["identity"] == identity
    }
    assert sum(states.values()) == 5
    assert states["failed"] == 1 and states["queued"] == 1 and states["sending"] == 1
    assert after.value("ratchet_database_up") == 1


def work_the_campaign_lane(env: Env) -> None:
    """An RQ worker in this process, until the lane's queue is empty (nothing scheduled)."""
    redis = Redis.from_url(env.config.redis_url)
    try:
        queue = Queue(queue_name("campaign"), connection=redis)
        SimpleWorker([queue], connection=redis).work(burst=True, with_scheduler=False)
    finally:
        redis.close()


def _tenant_of(env: Env, number: dict[str, Any]) -> int:
    with env.db.transaction() as session:
        row = session.get(Identity, number["identity_id"])
        assert row is not None
        return row.tenant_id
