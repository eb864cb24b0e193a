"""The identities page through the Flask client: what it shows, pause and resume (whole
identity or campaign lane) for operators, the role and tenant boundaries, and the audit
row of every action (rates and secrets: tests/views/test_identity_settings.py)."""

from __future__ import annotations

from datetime import timedelta

from flask import Flask
from flask.testing import FlaskClient
from redis import Redis

from app.db import Database
from app.models import Identity, Message
from app.repo.claims import claim_batch, claim_message
from app.repo.identities import pause_identity
from app.repo.queue import due_drains
from app.repo.windows import open_window
from jobs.pacing import Pacer
from jobs.queues import drain_keys

from ..factories import make_message
from .dashboard_world import (
    LEASE,
    NOW,
    Tenants,
    client_for,
    page_token,
)
from .identity_forms import admin, audit_rows, identity_row, operator, post

__all__ = ["admin", "operator"]  # the fixtures, imported for these tests


def test_the_page_shows_provider_account_rates_pace_windows_and_when_the_secrets_were_set(
    operator: FlaskClient, db: Database, tenants: Tenants, app: Flask
) -> None:
    with db.transaction() as session:
        open_window(session, tenants.acme.identity_id, "15551230000", NOW - timedelta(hours=1))
        open_window(session, tenants.acme.identity_id, "15551230001", NOW - timedelta(hours=30))
    page = operator.get("/identities").get_data(as_text=True)
    assert "whatsapp" in page and "1000001" in page
    assert "20 / 10 / 80" in page
    assert "full speed" in page
    assert "token set on 2026-11-30 12:00:00 UTC" in page
    assert "app secret set on 2026-11-30 12:00:00 UTC" in page
    assert "token-acme-1234567890" not in page and "app-secret-acme" not in page
    # One window still open (the other closed 6 hours ago).
    assert '<td data-label="Open windows" class="num">1</td>' in page
    # Another tenant's identity is not on the page.
    assert "2000002" not in page


def test_the_page_says_when_the_provider_slowed_the_identity_down(
    operator: FlaskClient, tenants: Tenants, app: Flask
) -> None:
    redis: Redis = app.extensions["ratchet.redis"]
    Pacer(redis).slow_down(tenants.acme.identity_id)
    page = operator.get("/identities").get_data(as_text=True)
    assert "slowed by the provider" in page and "to 50%" in page and "40/s total" in page


def test_an_operator_pauses_the_whole_identity_with_a_reason_and_nothing_is_claimed(
    operator: FlaskClient, db: Database, tenants: Tenants
) -> None:
    reply = make_message(db, tenants.acme, lane="reply", now=NOW)
    make_message(db, tenants.acme, lane="campaign", now=NOW)
    page = post(
        operator,
        f"/identities/{tenants.acme.identity_id}/pause",
        scope="identity",
        reason="Meta review of our templates",
    )
    assert "paused: holds 2 messages on both lanes" in page
    assert "Meta review of our templates" in page and "by ops@acme.test" in page
    with db.transaction() as session:
        assert claim_message(session, reply, NOW, LEASE) is None
        assert due_drains(session, NOW) == []
    (row,) = audit_rows(db, "identity.pause")
    assert row.actor == "ops@acme.test" and row.target == f"identity:{tenants.acme.identity_id}"
    assert row.tenant_id == tenants.acme.tenant_id
    assert row.detail == {
        "reason": "Meta review of our templates",
        "scope": "identity",
        "holds": 2,
        "via": "web",
    }
    # The overview shows it too.
    overview = operator.get("/").get_data(as_text=True)
    assert overview.count("❚❚</span> PAUSED") == 2 and "Meta review of our templates" in overview


def test_a_campaign_lane_pause_holds_campaigns_and_lets_replies_go_on(
    operator: FlaskClient, db: Database, tenants: Tenants
) -> None:
    reply = make_message(db, tenants.acme, lane="reply", now=NOW)
    campaign = make_message(db, tenants.acme, lane="campaign", now=NOW)
    page = post(
        operator,
        f"/identities/{tenants.acme.identity_id}/pause",
        scope="campaign",
        reason="campaign sent by mistake",
    )
    assert "campaign lane paused: holds 1 campaign messages; replies go on" in page
    iid = tenants.acme.identity_id
    with db.transaction() as session:
        # The sweeper rings the reply lane only; the claims take replies only.
        assert due_drains(session, NOW) == [(iid, "reply")]
        assert claim_batch(session, iid, "campaign", 10, NOW, LEASE) == []
        assert claim_message(session, campaign, NOW, LEASE) is None
        claims = claim_batch(session, iid, "reply", 10, NOW, LEASE)
        assert [c.message_id for c in claims] == [reply]
    (row,) = audit_rows(db, "identity.pause_campaign")
    assert row.detail is not None and row.detail["scope"] == "campaign"
    overview = operator.get("/").get_data(as_text=True)
    assert overview.count("❚❚</span> PAUSED") == 1
    assert "campaign lane paused: campaign sent by mistake" in overview
    stuck_reason = identity_row(db, iid).campaign_paused_reason
    assert stuck_reason == "campaign sent by mistake"


def test_resuming_the_campaign_lane_makes_it_claimable_and_rings_its_drain(
    operator: FlaskClient, db: Database, tenants: Tenants, app: Flask
) -> None:
    iid = tenants.acme.identity_id
    campaign = make_message(db, tenants.acme, lane="campaign", now=NOW)
    post(operator, f"/identities/{iid}/pause", scope="campaign", reason="hold on")
    redis: Redis = app.extensions["ratchet.redis"]
    redis.flushdb()
    page = post(operator, f"/identities/{iid}/resume", scope="campaign")
    assert f"Identity {iid}, campaign lane resumed: 1 due now." in page
    pending, dirty = drain_keys(iid, "campaign")
    assert redis.exists(pending) and redis.exists(dirty), "the campaign drain was not rung"
    assert not redis.exists(drain_keys(iid, "reply")[0])
    with db.transaction() as session:
        assert claim_message(session, campaign, NOW, LEASE) is not None
    (row,) = audit_rows(db, "identity.resume_campaign")
    assert row.detail == {"scope": "campaign", "released": 0, "due_now": 1, "via": "web"}


def test_resuming_a_broken_sender_releases_what_it_held_and_rings_both_lanes(
    operator: FlaskClient, db: Database, tenants: Tenants, app: Flask
) -> None:
    iid = tenants.acme.identity_id
    held = make_message(db, tenants.acme, lane="reply", now=NOW)
    with db.transaction() as session:
        assert claim_message(session, held, NOW, LEASE) is not None
        # What a 190 answer does: the identity paused, the message held with no lease.
        session.execute(
            Message.__table__.update()
            .where(Message.id == held)
            .values(lease_until=None, next_attempt_at=None)
        )
        pause_identity(session, iid, "190: token expired", NOW)
    page = operator.get("/identities").get_data(as_text=True)
    assert "190: token expired" in page and "by ratchet" in page
    page = post(operator, f"/identities/{iid}/resume", scope="identity")
    assert f"Identity {iid} resumed: 1 due now." in page
    redis: Redis = app.extensions["ratchet.redis"]
    for lane in ("reply", "campaign"):
        assert redis.exists(drain_keys(iid, lane)[1]), f"the {lane} drain was not rung"
    with db.transaction() as session:
        message = session.get(Message, held, populate_existing=True)
        assert message is not None and message.next_attempt_at == NOW
        identity = session.get(Identity, iid, populate_existing=True)
        assert identity is not None and identity.paused_at is None and identity.resumed_at == NOW
    (row,) = audit_rows(db, "identity.resume")
    assert row.detail == {"scope": "identity", "released": 1, "due_now": 1, "via": "web"}


def test_a_pause_without_a_reason_is_refused_and_changes_nothing(
    operator: FlaskClient, db: Database, tenants: Tenants
) -> None:
    page = post(operator, f"/identities/{tenants.acme.identity_id}/pause", reason="   ")
    assert "not paused: say why it is paused" in page
    assert identity_row(db, tenants.acme.identity_id).paused_at is None
    assert audit_rows(db) == []


def test_pausing_twice_keeps_the_first_reason_and_says_so(
    operator: FlaskClient, db: Database, tenants: Tenants
) -> None:
    path = f"/identities/{tenants.acme.identity_id}/pause"
    post(operator, path, scope="identity", reason="first")
    page = post(operator, path, scope="identity", reason="second")
    assert "was already paused; nothing changed" in page
    assert identity_row(db, tenants.acme.identity_id).paused_reason == "first"
    assert len(audit_rows(db, "identity.pause")) == 1


def test_a_viewer_can_read_the_page_but_not_pause_or_resume(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    viewer = client_for(app, db, "view@acme.test", "viewer", tenants.acme.tenant_id)
    page = viewer.get("/identities").get_data(as_text=True)
    assert "1000001" in page and "Pause identity" not in page
    token = page_token(viewer, "/identities")
    for action in ("pause", "resume"):
        answer = viewer.post(
            f"/identities/{tenants.acme.identity_id}/{action}",
            data={"csrf_token": token, "reason": "x", "scope": "identity"},
        )
        assert answer.status_code == 403
    assert identity_row(db, tenants.acme.identity_id).paused_at is None


def test_an_operator_cannot_change_rates_or_secrets(
    operator: FlaskClient, db: Database, tenants: Tenants
) -> None:
    page = operator.get("/identities").get_data(as_text=True)
    assert "Pause identity" in page and "Save rates" not in page and "new token" not in page
    token = page_token(operator, "/identities")
    iid = tenants.acme.identity_id
    rates = operator.post(f"/identities/{iid}/rates", data={"csrf_token": token, "reply_rate": "5"})
    secret = operator.post(
        f"/identities/{iid}/credentials", data={"csrf_token": token, "token": "stolen"}
    )
    assert rates.status_code == 403 and secret.status_code == 403
    assert identity_row(db, iid).reply_rate == 20


def test_a_tenants_operator_cannot_pause_another_tenants_identity(
    operator: FlaskClient, db: Database, tenants: Tenants
) -> None:
    other = tenants.other.identity_id
    token = page_token(operator, "/identities")
    for action in ("pause", "resume"):
        answer = operator.post(
            f"/identities/{other}/{action}", data={"csrf_token": token, "reason": "x"}
        )
        assert answer.status_code == 404
    assert identity_row(db, other).paused_at is None
    assert audit_rows(db) == []


def test_platform_staff_see_every_tenants_identities(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    platform = client_for(app, db, "root@ratchet.test", "operator", None)
    page = platform.get("/identities").get_data(as_text=True)
    assert "1000001" in page and "2000002" in page
    narrowed = platform.get(f"/identities?tenant={tenants.other.tenant_id}").get_data(as_text=True)
    assert "2000002" in narrowed and "1000001" not in narrowed


def test_the_stuck_page_says_a_campaign_waits_for_its_paused_lane(
    operator: FlaskClient, db: Database, tenants: Tenants
) -> None:
    make_message(db, tenants.acme, lane="campaign", now=NOW - timedelta(minutes=5))
    post(
        operator,
        f"/identities/{tenants.acme.identity_id}/pause",
        scope="campaign",
        reason="legal review",
    )
    page = operator.get("/stuck").get_data(as_text=True)
    assert "campaign lane paused: legal review (replies go on)" in page


def test_a_paused_identity_can_still_have_its_campaign_lane_paused_for_after_the_resume(
    operator: FlaskClient, db: Database, tenants: Tenants
) -> None:
    iid = tenants.acme.identity_id
    post(operator, f"/identities/{iid}/pause", scope="identity", reason="190")
    page = operator.get("/identities").get_data(as_text=True)
    assert 'value="identity"' not in page.split("Pause what")[1].split("</fieldset>")[0]
    assert "campaign lane only (0 waiting; replies go on once the identity is resumed)" in page
    post(operator, f"/identities/{iid}/pause", scope="campaign", reason="hold the campaign")
    post(operator, f"/identities/{iid}/resume", scope="identity")
    row = identity_row(db, iid)
    assert row.paused_at is None and row.campaign_paused_reason == "hold the campaign"
