"""New rates from the identities page ring the drains of the lane holding waiting
messages (a new shard count must not leave them to the sweeper's next pass; the same
through the CLI, with shards, is in tests/jobs/test_rate_change_rings.py)."""

from __future__ import annotations

from flask import Flask
from redis import Redis

from app.db import Database
from jobs.queues import drain_keys

from ..factories import make_message
from .dashboard_world import NOW, Tenants, client_for, page_token


def test_new_rates_from_the_page_ring_the_lane_holding_waiting_messages(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    admin = client_for(app, db, "admin@acme.test", "admin", tenants.acme.tenant_id)
    iid = tenants.acme.identity_id
    make_message(db, tenants.acme, lane="campaign", now=NOW)
    redis: Redis = app.extensions["ratchet.redis"]
    redis.flushdb()  # the intake's ring is gone: only the rate change can ring now
    form = {"csrf_token": page_token(admin, "/identities"), "campaign_rate": "40"}
    response = admin.post(f"/identities/{iid}/rates", data=form, follow_redirects=True)
    page = response.get_data(as_text=True)
    assert response.status_code == 200 and "campaign rate changed" in page
    assert "unreachable" not in page
    pending, dirty = drain_keys(iid, "campaign")
    assert redis.exists(pending) and redis.exists(dirty), "the campaign drain was not rung"
