"""Bulk requeue and bulk cancel through the dashboard: the preview states the exact count and
its breakdown, the confirmation runs on the campaign lane (or the sweeper, after a Redis
flush), the page shows progress, and each role may do exactly what it should."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient
from redis import Redis
from rq import Queue
from sqlalchemy import select

from app.db import Database
from app.models import AuditEntry, Message
from app.models_operations import BulkPlan
from jobs.queues import queue_name
from jobs.sweep import sweep_once

from ..factories import make_message
from .bulk_requeue import confirm, exhausted, preview, work_one_campaign_job
from .dashboard_world import HTMX, NOW, Tenants, client_for, csrf_token, failed_message, page_token

pytestmark = pytest.mark.usefixtures("one_user_per_request")


@pytest.fixture
def operator(app: Flask, db: Database, tenants: Tenants) -> FlaskClient:
    return client_for(app, db, "ops@acme.test", "operator", tenants.acme.tenant_id)


@pytest.fixture
def viewer(app: Flask, db: Database, tenants: Tenants) -> FlaskClient:
    return client_for(app, db, "look@acme.test", "viewer", tenants.acme.tenant_id)


def status_of(db: Database, message_id: int) -> str:
    with db.transaction() as session:
        message = session.get(Message, message_id, populate_existing=True)
        assert message is not None
        return message.status


def test_an_operator_reads_the_count_and_breakdown_confirms_and_the_campaign_lane_runs_it(
    app: Flask, operator: FlaskClient, db: Database, tenants: Tenants, redis_url: str
) -> None:
    ours = [exhausted(db, tenants.acme, m) for m in range(3)]
    template = failed_message(db, tenants.acme)  # needs_human 132001: opt-in
    theirs = exhausted(db, tenants.other)
    page = operator.get("/dead-letters").get_data(as_text=True)
    assert "Requeue matching…" in page
    plan_id, page = preview(operator)
    assert "The filters match 4" in page
    assert re.search(r'value="exhausted:131000" data-count="3"\s+checked', page)
    assert re.search(r'value="needs_human:132001" data-count="1"\s*>', page)
    assert 'Requeue <span id="confirm-count">3</span>' in page
    page = confirm(operator, plan_id, ["exhausted:131000"])
    assert "Requeueing 3 messages." in page
    assert "0/3" in page and "Running" in page
    assert 'hx-trigger="every 1s' in page
    queue = Queue(queue_name("campaign"), connection=app.extensions["ratchet.redis"])
    assert [job.func_name for job in queue.jobs] == ["jobs.bulk.run_bulk_plan"]
    assert not Queue(queue_name("reply"), connection=app.extensions["ratchet.redis"]).jobs
    work_one_campaign_job(redis_url)
    assert [status_of(db, i) for i in ours] == ["queued"] * 3
    assert status_of(db, template) == "failed"
    assert status_of(db, theirs) == "failed"
    progress = operator.get(f"/bulk/{plan_id}/progress", headers=HTMX).get_data(as_text=True)
    assert "3/3</strong>:" in progress and "3 requeued, 0 skipped" in progress
    assert 'hx-trigger="every 5s' in progress  # done: it follows them (test_bulk_aftermath)
    audit = operator.get("/audit?action=bulk").get_data(as_text=True)
    assert "bulk.requeue.done" in audit and "bulk.requeue" in audit
    assert f"bulk plan #{plan_id}" in audit
    message_page = operator.get(f"/messages/{ours[0]}").get_data(as_text=True)
    assert f"bulk plan #{plan_id}" in message_page
    assert "requeued" in message_page


def test_a_confirmed_plan_survives_a_redis_flush_the_sweeper_carries_it_out(
    app: Flask, operator: FlaskClient, db: Database, tenants: Tenants, redis_url: str
) -> None:
    ids = [exhausted(db, tenants.acme, m) for m in range(2)]
    plan_id, _ = preview(operator)
    confirm(operator, plan_id, ["exhausted:131000"])
    Redis.from_url(redis_url).flushdb()  # the job is gone; the plan is not
    sweep_once(db, app.config["RATCHET"], NOW)
    assert [status_of(db, i) for i in ids] == ["queued"] * 2
    with db.transaction() as session:
        assert session.get(BulkPlan, plan_id, populate_existing=True).status == "done"  # type: ignore[union-attr]


def test_the_preview_of_a_filtered_set_counts_only_what_the_filter_shows(
    operator: FlaskClient, db: Database, tenants: Tenants
) -> None:
    exhausted(db, tenants.acme)
    failed_message(db, tenants.acme)
    failed_message(db, tenants.acme, minute=1)
    _, page = preview(operator, code="132001")
    assert "The filters match 2" in page
    assert "code=132001" in page
    assert 'Requeue <span id="confirm-count">0</span>' in page


def test_a_viewer_reads_plans_and_the_audit_log_but_cannot_preview_confirm_stop_or_dismiss(
    app: Flask,
    operator: FlaskClient,
    viewer: FlaskClient,
    db: Database,
    tenants: Tenants,
) -> None:
    message_id = exhausted(db, tenants.acme)
    queued = make_message(db, tenants.acme)
    plan_id, _ = preview(operator)
    token = page_token(viewer, "/dead-letters")
    assert "Requeue matching…" not in viewer.get("/dead-letters").get_data(as_text=True)
    for path, form in [
        ("/dead-letters/bulk-requeue", {}),
        (f"/bulk/{plan_id}/confirm", {"group": "exhausted:131000"}),
        (f"/bulk/{plan_id}/stop", {}),
        (f"/dead-letters/{message_id}/dismiss", {"cycle": "1"}),
        (f"/messages/{queued}/cancel", {"cycle": "1", "reason": "no"}),
        ("/cancel/preview", {"identity": str(tenants.acme.identity_id)}),
    ]:
        response = viewer.post(path, data={"csrf_token": token, **form})
        assert response.status_code == 403, path
    page = viewer.get(f"/bulk/{plan_id}").get_data(as_text=True)
    assert "Read only: an operator can confirm this plan." in page
    assert viewer.get("/audit").status_code == 200
    assert viewer.get("/cancel").status_code == 403
    assert status_of(db, message_id) == "failed" and status_of(db, queued) == "queued"


def test_another_tenants_plan_is_not_found_and_their_audit_rows_are_not_shown(
    app: Flask, operator: FlaskClient, db: Database, tenants: Tenants
) -> None:
    exhausted(db, tenants.other)
    theirs_staff = client_for(app, db, "ops@other.test", "operator", tenants.other.tenant_id)
    plan_id, page = preview(theirs_staff)
    assert "The filters match 1" in page
    confirm(theirs_staff, plan_id, ["exhausted:131000"])
    assert operator.get(f"/bulk/{plan_id}").status_code == 404
    assert operator.get(f"/bulk/{plan_id}/progress").status_code == 404
    token = page_token(operator, "/dead-letters")
    assert operator.post(f"/bulk/{plan_id}/stop", data={"csrf_token": token}).status_code == 404
    _, ours = preview(operator)
    assert "Nothing to requeue" in ours  # their dead letter is not in our preview
    assert "ops@other.test" not in operator.get("/audit").get_data(as_text=True)
    platform = client_for(app, db, "root@platform.test", "viewer", None)
    everything = platform.get("/audit").get_data(as_text=True)
    assert "ops@other.test" in everything and f"bulk plan #{plan_id}" in everything


def test_stopping_a_running_plan_from_its_page_leaves_the_rest_untouched(
    operator: FlaskClient, db: Database, tenants: Tenants
) -> None:
    ids = [exhausted(db, tenants.acme, m) for m in range(2)]
    plan_id, _ = preview(operator)
    page = confirm(operator, plan_id, ["exhausted:131000"])
    response = operator.post(
        f"/bulk/{plan_id}/stop", data={"csrf_token": csrf_token(page)}, headers=HTMX
    )
    body = response.get_data(as_text=True)
    assert "Stopped" in body and "2 not touched (stopped)" in body
    assert [status_of(db, i) for i in ids] == ["failed", "failed"]
    with db.transaction() as session:
        row = session.scalars(
            select(AuditEntry).where(AuditEntry.action == "bulk.requeue.stop")
        ).one()
    assert row.actor == "ops@acme.test" and row.detail and row.detail["untouched"] == 2


def test_a_bulk_cancel_previews_the_queued_count_needs_a_reason_and_cancels_them(
    app: Flask, operator: FlaskClient, db: Database, tenants: Tenants
) -> None:
    ids = [make_message(db, tenants.acme, recipient=f"1555000000{n}") for n in range(3)]
    other = make_message(db, tenants.other)
    form = operator.get("/cancel").get_data(as_text=True)
    response = operator.post(
        "/cancel/preview",
        data={"csrf_token": csrf_token(form), "identity": str(tenants.acme.identity_id)},
    )
    plan_id = int(response.headers["Location"].rsplit("/", 1)[1].split("?")[0])
    page = operator.get(f"/bulk/{plan_id}").get_data(as_text=True)
    assert "The filters match 3" in page
    group = f"{tenants.acme.identity_id}:campaign"
    refused = confirm(operator, plan_id, [group])
    assert "Not started: a cancel needs a reason" in refused
    page = confirm(operator, plan_id, [group], reason="campaign sent by mistake")
    assert "Canceling 3 messages." in page
    sweep_once(db, app.config["RATCHET"], NOW)
    with db.transaction() as session:
        rows = session.scalars(select(Message).where(Message.id.in_([*ids, other]))).all()
        found = {m.id: (m.status, m.failure_class) for m in rows}
    assert [found[i] for i in ids] == [("failed", "canceled")] * 3
    assert found[other] == ("queued", None)
    detail = operator.get(f"/messages/{ids[0]}").get_data(as_text=True)
    assert "campaign sent by mistake" in detail


def test_one_queued_message_is_canceled_from_its_page_and_a_claimed_one_is_not(
    operator: FlaskClient, db: Database, tenants: Tenants
) -> None:
    queued = make_message(db, tenants.acme)
    page = operator.get(f"/messages/{queued}").get_data(as_text=True)
    assert "Cancel this message" in page
    response = operator.post(
        f"/messages/{queued}/cancel",
        data={"csrf_token": csrf_token(page), "cycle": "1", "reason": "wrong number"},
        follow_redirects=True,
    )
    assert "Canceled: it will never be sent." in response.get_data(as_text=True)
    assert status_of(db, queued) == "failed"
    claimed = make_message(db, tenants.acme, recipient="15550001111")
    from app.repo.claims import claim_message

    from .dashboard_world import LEASE

    with db.transaction() as session:
        assert claim_message(session, claimed, NOW, LEASE) is not None
    page = operator.get(f"/messages/{claimed}").get_data(as_text=True)
    assert "Cancel this message" not in page
    response = operator.post(
        f"/messages/{claimed}/cancel",
        data={"csrf_token": csrf_token(page), "cycle": "1", "reason": "too late"},
        follow_redirects=True,
    )
    assert "Not canceled: already claimed by a worker: it may be in flight" in response.get_data(
        as_text=True
    )
    assert status_of(db, claimed) == "sending"
    with db.transaction() as session:
        actions = [
            (a.target, a.action)
            for a in session.scalars(
                select(AuditEntry)
                .where(AuditEntry.action.startswith("message."))
                .order_by(AuditEntry.id)
            )
        ]
    assert actions == [
        (f"message:{queued}", "message.cancel"),
        (f"message:{claimed}", "message.cancel_refused"),
    ]


def test_a_dismissed_dead_letter_leaves_the_list_stays_searchable_and_is_audited(
    operator: FlaskClient, db: Database, tenants: Tenants
) -> None:
    message_id = failed_message(db, tenants.acme, key="order-77")
    page = operator.get("/dead-letters").get_data(as_text=True)
    assert f'action="/dead-letters/{message_id}/dismiss"' in page
    response = operator.post(
        f"/dead-letters/{message_id}/dismiss",
        data={"csrf_token": csrf_token(page), "cycle": "1", "reason": "customer called"},
        headers=HTMX,
    )
    assert "Dismissed: off the list" in response.get_data(as_text=True)
    assert f"#{message_id}" not in operator.get("/dead-letters").get_data(as_text=True)
    dismissed = operator.get("/dead-letters?dismissed=1").get_data(as_text=True)
    assert f"#{message_id}" in dismissed and "Dismissed: off the actionable list." in dismissed
    found = operator.get("/search?q=order-77")
    assert found.status_code in (200, 302)
    assert str(message_id) in (found.headers.get("Location", "") + found.get_data(as_text=True))
    with db.transaction() as session:
        row = session.scalars(
            select(AuditEntry).where(AuditEntry.action == "message.dismiss")
        ).one()
    assert (row.actor, row.action, row.target) == (
        "ops@acme.test",
        "message.dismiss",
        f"message:{message_id}",
    )
    assert row.detail and row.detail["reason"] == "customer called"
    again = operator.post(
        f"/dead-letters/{message_id}/dismiss",
        data={"csrf_token": csrf_token(page), "cycle": "1"},
        headers=HTMX,
    )
    assert "Not dismissed: already off the list" in again.get_data(as_text=True)


def test_the_clis_dead_letters_leave_out_a_dismissed_one(
    app: Flask, operator: FlaskClient, db: Database, tenants: Tenants
) -> None:
    kept = failed_message(db, tenants.acme)
    gone = failed_message(db, tenants.acme, minute=1)
    page = operator.get("/dead-letters").get_data(as_text=True)
    operator.post(
        f"/dead-letters/{gone}/dismiss", data={"csrf_token": csrf_token(page), "cycle": "1"}
    )
    result = app.test_cli_runner().invoke(args=["message", "dead-letters"])
    assert result.exit_code == 0, result.output
    listed = [line.split()[0] for line in result.output.splitlines()[1:-1]]
    assert listed == [str(kept)]


def test_platform_staff_preview_every_tenant_or_the_one_they_narrowed_to_and_an_admin_may_too(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    exhausted(db, tenants.acme)
    exhausted(db, tenants.other)
    platform = client_for(app, db, "root@platform.test", "admin", None)
    plan_id, page = preview(platform)
    assert "The filters match 2" in page
    token = page_token(platform, f"/dead-letters?tenant={tenants.other.tenant_id}")
    response = platform.post(
        f"/dead-letters/bulk-requeue?tenant={tenants.other.tenant_id}", data={"csrf_token": token}
    )
    narrowed = platform.get(response.headers["Location"]).get_data(as_text=True)
    assert "The filters match 1" in narrowed
    with db.transaction() as session:
        plans = {p.id: p.tenant_id for p in session.scalars(select(BulkPlan))}
    assert plans[plan_id] is None
    assert sorted(plans.values(), key=str) == sorted([None, tenants.other.tenant_id], key=str)


def test_a_preview_nobody_confirmed_within_a_day_is_swept_and_cannot_be_confirmed(
    app: Flask, operator: FlaskClient, db: Database, tenants: Tenants
) -> None:
    message_id = exhausted(db, tenants.acme)
    stale_id, _ = preview(operator)
    running_id, _ = preview(operator)
    confirm(operator, running_id, ["exhausted:131000"])
    sweep_once(db, app.config["RATCHET"], NOW + timedelta(hours=25))
    with db.transaction() as session:
        left = {p.id: p.status for p in session.scalars(select(BulkPlan))}
    assert left == {running_id: "done"}
    page = confirm(operator, stale_id, ["exhausted:131000"])
    assert "That preview is gone (previews expire after a day): preview again." in page
    assert status_of(db, message_id) == "queued"  # by the plan that was confirmed


def test_the_stuck_page_offers_operators_a_cancel_of_a_queued_message_and_viewers_none(
    operator: FlaskClient, viewer: FlaskClient, db: Database, tenants: Tenants
) -> None:
    queued = make_message(db, tenants.acme)  # queued at T0, ten minutes ago: stuck
    link = f'href="/messages/{queued}#cancel">Cancel…</a>'
    assert link in operator.get("/stuck").get_data(as_text=True)
    assert "Cancel queued messages…" in operator.get("/stuck").get_data(as_text=True)
    page = viewer.get("/stuck").get_data(as_text=True)
    assert f"#{queued}" in page and link not in page and "Cancel queued messages…" not in page
