"""The audit log page: every action with who, when, what and how many, from the dashboard,
the API and the command line; filtered by actor, action and time; a tenant's staff see
their own tenant's rows only. And the message page's ticket summary."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from flask import Flask

from app.db import Database
from app.repo.staff import record_audit

from ..conftest import T0
from ..factories import make_message
from .dashboard_world import (
    NOW,
    PASSWORD,
    Tenants,
    client_for,
    csrf_token,
    failed_message,
    make_staff,
    sign_in,
)

pytestmark = pytest.mark.usefixtures("one_user_per_request")


def actions_in(page: str) -> list[str]:
    """The Action cell of each row shown, in order."""
    return re.findall(r'<td data-label="Action">([^<]+)</td>', page)


def test_a_cli_requeue_an_api_cancel_and_sign_ins_all_appear_with_who_and_via(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    failed = failed_message(db, tenants.acme)
    queued = make_message(db, tenants.acme, recipient="15550002222")
    cli = app.test_cli_runner()
    result = cli.invoke(args=["message", "requeue", str(failed), "--by", "cli:maria"])
    assert result.exit_code == 0, result.output
    result = cli.invoke(args=["message", "cancel", str(queued), "--reason", "duplicate order"])
    assert result.exit_code == 0, result.output
    api = app.test_client()
    third = make_message(db, tenants.acme, recipient="15550003333")
    response = api.post(
        f"/v1/messages/{third}/cancel", headers={"Authorization": f"Bearer {tenants.acme.api_key}"}
    )
    assert response.status_code == 200
    make_staff(db, "look@acme.test", "viewer", tenants.acme.tenant_id)
    viewer = app.test_client()
    page = viewer.get("/sign-in").get_data(as_text=True)
    refused = viewer.post(
        "/sign-in",
        data={"email": "look@acme.test", "password": "wrong", "csrf_token": csrf_token(page)},
    )
    assert refused.status_code == 401
    sign_in(viewer, "look@acme.test")
    page = viewer.get("/audit").get_data(as_text=True)
    assert "cli:maria" in page and "message.requeue" in page
    assert "message.cancel" in page and "“duplicate order”" in page
    assert "api:acme" in page
    assert actions_in(page)[:2] == ["staff.sign_in", "staff.sign_in_failed"]
    assert f'href="/messages/{failed}"' in page
    assert page.count(">cli<") == 2  # the requeue and the cancel came from the CLI
    assert ">api<" in page


def test_the_log_filters_by_actor_action_family_and_time(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    with db.transaction() as session:
        for minute, actor, action in [
            (0, "ops@acme.test", "message.requeue"),
            (5, "ops@acme.test", "bulk.requeue"),
            (8, "boss@acme.test", "bulk.requeue.done"),
            (20, "boss@acme.test", "identity.pause"),
        ]:
            record_audit(
                session,
                actor,
                action,
                "message:1",
                T0 + timedelta(minutes=minute),
                {"planned": 7} if action.startswith("bulk") else None,
                tenant_id=tenants.acme.tenant_id,
            )
    client = client_for(app, db, "look@acme.test", "viewer", tenants.acme.tenant_id)
    by_actor = client.get("/audit?actor=BOSS").get_data(as_text=True)
    assert actions_in(by_actor) == ["identity.pause", "bulk.requeue.done"]
    family = client.get("/audit?action=bulk").get_data(as_text=True)
    assert actions_in(family) == ["bulk.requeue.done", "bulk.requeue"]
    assert "planned 7" in family
    window = client.get("/audit?since=2026-11-30T12:04&until=2026-11-30T12:09").get_data(
        as_text=True
    )
    assert actions_in(window) == ["bulk.requeue.done", "bulk.requeue"]
    none = client.get("/audit?actor=nobody").get_data(as_text=True)
    assert "No actions match." in none


def test_the_log_pages_newest_first_by_keyset(app: Flask, db: Database, tenants: Tenants) -> None:
    with db.transaction() as session:
        for n in range(55):
            record_audit(
                session,
                f"actor-{n:02d}",
                "message.requeue",
                "message:1",
                T0,
                None,
                tenant_id=tenants.acme.tenant_id,
            )
    client = client_for(app, db, "look@acme.test", "viewer", tenants.acme.tenant_id)
    first = client.get("/audit?action=message.requeue").get_data(as_text=True)
    assert "actor-54" in first and "actor-05" in first and "actor-04" not in first
    found = first.split('rel="next"')[0].rsplit('href="', 1)[1].split('"')[0].replace("&amp;", "&")
    second = client.get(found).get_data(as_text=True)
    assert "actor-04" in second and "actor-00" in second and "actor-05" not in second


def test_a_tenants_staff_see_only_their_tenants_rows_and_platform_staff_see_all(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    with db.transaction() as session:
        record_audit(
            session,
            "a@acme.test",
            "message.requeue",
            "message:1",
            T0,
            None,
            tenant_id=tenants.acme.tenant_id,
        )
        record_audit(
            session,
            "o@other.test",
            "message.requeue",
            "message:2",
            T0,
            None,
            tenant_id=tenants.other.tenant_id,
        )
    acme = client_for(app, db, "look@acme.test", "viewer", tenants.acme.tenant_id)
    page = acme.get(f"/audit?tenant={tenants.other.tenant_id}").get_data(as_text=True)
    assert "a@acme.test" in page and "o@other.test" not in page
    platform = client_for(app, db, "root@platform.test", "viewer", None)
    page = platform.get("/audit").get_data(as_text=True)
    assert "a@acme.test" in page and "o@other.test" in page
    narrowed = platform.get(f"/audit?tenant={tenants.other.tenant_id}").get_data(as_text=True)
    assert "o@other.test" in narrowed and "a@acme.test" not in narrowed


def test_the_ticket_summary_states_the_failure_masked_and_without_the_body(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    message_id = failed_message(db, tenants.acme, recipient="15557654321")
    client = client_for(app, db, "look@acme.test", "viewer", tenants.acme.tenant_id)
    page = client.get(f"/messages/{message_id}").get_data(as_text=True)
    assert "Copy ticket summary" in page
    summary = page.split('id="ticket-summary"', 1)[1].split(">", 1)[1].split("</textarea>")[0]
    assert f"Message #{message_id} via whatsapp, to …4321" in summary
    assert "State: failed since 2026-11-30 12:00:00 UTC (10 m ago)" in summary
    assert "Provider error: 132001 (class needs_human)" in summary
    # None of the provider's free text: its title can echo parameters (docs/dashboard.md agrees).
    assert "Template name does not exist" not in summary
    assert "Meaning: " in summary
    assert "Attempts: 1 this cycle, 1 in all" in summary
    assert "Requeues: none" in summary
    assert "15557654321" not in summary and "hello" not in summary  # no number, no body
    assert PASSWORD not in summary


def test_the_ticket_summary_counts_requeues_and_says_a_canceled_message_never_went(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    from app.repo.cancels import cancel_message
    from app.repo.requeues import requeue_message

    message_id = failed_message(db, tenants.acme)
    with db.transaction() as session:
        requeue_message(session, message_id, NOW, actor="ops")
        cancel_message(session, message_id, NOW, actor="ops", reason="secret internal reason")
    client = client_for(app, db, "look@acme.test", "viewer", tenants.acme.tenant_id)
    page = client.get(f"/messages/{message_id}").get_data(as_text=True)
    summary = page.split('id="ticket-summary"', 1)[1].split("</textarea>")[0]
    assert "Why: canceled by support before it was sent; it was never sent" in summary
    assert "Requeues: 1 (last 2026-11-30 12:10:00 UTC)" in summary
    assert "secret internal reason" not in summary


def test_the_clis_cancel_refuses_a_claimed_message_and_says_why(
    app: Flask, db: Database, tenants: Tenants
) -> None:
    from app.repo.claims import claim_message

    from .dashboard_world import LEASE

    message_id = make_message(db, tenants.acme)
    with db.transaction() as session:
        assert claim_message(session, message_id, NOW, LEASE) is not None
    result = app.test_cli_runner().invoke(
        args=["message", "cancel", str(message_id), "--reason", "too late", "--by", "cli:maria"]
    )
    assert result.exit_code == 1
    assert "not canceled: already claimed by a worker: it may be in flight" in result.output
    missing = app.test_cli_runner().invoke(args=["message", "cancel", "999999", "--reason", "x"])
    assert missing.exit_code == 1 and "does not exist" in missing.output
