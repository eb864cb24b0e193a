"""Numbers that agree and words that do not mislead: the overview's dead-letter count is the
dead-letter page's, its link keeps the lane, a held message says why, a finished message
counts no lease down, and a lane nobody works is not called sending."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient
from rq import SimpleWorker
from sqlalchemy import update

from app.db import Database
from app.models import Message
from app.repo.cancels import cancel_message, dismiss_message
from app.repo.identities import pause_identity
from jobs.queues import get_queue, get_redis

from ..factories import make_message
from .dashboard_world import (
    NOW,
    Tenants,
    failed_message,
    make_staff,
    sent_message,
    sign_in,
    use_clock,
)


@pytest.fixture
def client(app: Flask, db: Database, tenants: Tenants) -> FlaskClient:
    use_clock(app)
    make_staff(db, "ops@acme.test", "operator", tenants.acme.tenant_id)
    client = app.test_client()
    sign_in(client, "ops@acme.test")
    return client


def text(client: FlaskClient, path: str) -> str:
    response = client.get(path)
    assert response.status_code == 200, response.status_code
    return response.get_data(as_text=True)


def dead_letter_rows(page: str) -> int:
    return len(re.findall(r'<tr id="dead-letter-\d+"', page))


def test_the_overview_counts_the_dead_letters_its_link_lists_and_the_link_keeps_the_lane(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    kept = [failed_message(db, tenants.acme, minute=n) for n in range(3)]
    dismissed = failed_message(db, tenants.acme, minute=4)
    canceled = make_message(db, tenants.acme)
    with db.transaction() as session:
        dismiss_message(
            session, dismissed, NOW, actor="ops", reason="done", tenant_id=None, expected_cycle=1
        )
        cancel_message(session, canceled, NOW, actor="ops", reason="sent by mistake")
    make_message(db, tenants.acme, lane="reply")
    overview = text(client, "/")
    link = re.search(r'<a href="(/dead-letters\?[^"]+)">(\d+)</a>', overview)
    assert link is not None
    assert link.group(2) == "3"  # not 5: the dismissed and the canceled are off the list
    href = link.group(1).replace("&amp;", "&")
    assert "lane=campaign" in href and f"identity={tenants.acme.identity_id}" in href
    listed = text(client, href)
    assert dead_letter_rows(listed) == 3
    assert all(f'id="dead-letter-{message_id}"' in listed for message_id in kept)


def test_the_dead_letter_page_filters_by_lane(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    failed_message(db, tenants.acme)
    with db.transaction() as session:
        session.execute(update(Message).values(lane="reply"))
    failed_message(db, tenants.acme, minute=1)
    assert dead_letter_rows(text(client, "/dead-letters")) == 2
    assert dead_letter_rows(text(client, "/dead-letters?lane=reply")) == 1
    assert dead_letter_rows(text(client, "/dead-letters?lane=campaign")) == 1


def test_a_message_held_by_a_paused_identity_says_held_not_sending(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    message_id = make_message(db, tenants.acme, now=NOW - timedelta(minutes=1))
    with db.transaction() as session:
        pause_identity(session, tenants.acme.identity_id, "token expired", NOW)
        session.execute(update(Message).values(status="sending"))
    page = text(client, f"/messages/{message_id}")
    assert "held (identity paused)" in page
    assert "◐</span> sending" not in page


def test_a_held_message_mid_attempt_counts_no_lease_or_retry_down_and_its_ticket_says_held(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    """Claimed, and given back by the attempt that paused its identity (`record_held`: its
    lease cleared, a retry time left): the page, its 3-second refresh and the ticket summary
    say held, never sending, and count nothing down. (With a live lease a call may still be
    in flight: `test_held_in_flight.py`.)"""
    message_id = make_message(db, tenants.acme, now=NOW - timedelta(minutes=1))
    with db.transaction() as session:
        pause_identity(session, tenants.acme.identity_id, "token expired", NOW)
        session.execute(
            update(Message).values(
                status="sending",
                sending_at=NOW - timedelta(seconds=30),
                lease_until=None,
                next_attempt_at=NOW + timedelta(seconds=40),
            )
        )
    for path in (f"/messages/{message_id}", f"/messages/{message_id}/status"):
        page = text(client, path)
        widget = page.split('id="status-widget"', 1)[1].split("</section>", 1)[0]
        assert "held (identity paused)" in widget
        assert "Nothing is sent until it resumes" in widget
        assert "sending" not in widget.replace("state-box-sending", "")
        assert "in flight until" not in widget and "next attempt" not in widget
    page = text(client, f"/messages/{message_id}")
    assert "State: held (identity paused), nothing is sent until it resumes" in page
    assert "State: sending" not in page


def test_a_read_message_counts_no_lease_down(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    message_id = sent_message(db, tenants.acme, "wamid.READ")
    with db.transaction() as session:  # a read applied while the send's lease still ran
        lease = NOW + timedelta(seconds=8)
        session.execute(update(Message).values(status="read", read_at=NOW, lease_until=lease))
    page = text(client, f"/messages/{message_id}")
    assert "in flight until" not in page
    assert "next attempt" not in page


def test_the_identities_page_says_a_lane_with_waiting_messages_and_no_worker_is_not_sending(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    make_message(db, tenants.acme, lane="campaign")
    redis = get_redis()
    SimpleWorker([get_queue("reply", redis)], connection=redis, name="reply-1").register_birth()
    page = text(client, "/identities")
    row = page[page.index(f'id="identity-{tenants.acme.identity_id}"') :]
    row = row[: row.index("</tr>")]
    campaign = row[row.index('data-label="Campaign lane"') :]
    reply = row[row.index('data-label="Reply lane"') : row.index('data-label="Campaign lane"')]
    assert "NOT SENDING" in campaign and "no live worker on this lane" in campaign
    assert "● </span> sending" not in campaign
    assert "NOT SENDING" not in reply
