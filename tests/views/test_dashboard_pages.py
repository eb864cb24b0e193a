"""Every dashboard page through the Flask client: what a support person reads on it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.db import Database
from app.repo.identities import pause_identity
from app.repo.inbox import Result
from app.views.pages import STATUS_RESULTS, call_time, status_result

from ..conftest import T0
from ..factories import make_message
from ..meta import encode, sign, status, status_body
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


def text(client: FlaskClient, path: str, **kwargs: object) -> str:
    response = client.get(path, **kwargs)  # type: ignore[arg-type]
    assert response.status_code == 200, response.status_code
    return response.get_data(as_text=True)


def test_the_overview_shows_a_lane_whose_oldest_due_message_waited_past_the_threshold_as_stuck(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    make_message(db, tenants.acme, lane="campaign", now=NOW - timedelta(minutes=4, seconds=12))
    make_message(db, tenants.acme, lane="reply", now=NOW - timedelta(seconds=3))
    page = text(client, "/")
    assert "▲</span> STUCK" in page
    assert "4 m 12 s" in page
    # Trouble first: the stuck campaign lane comes before the healthy reply lane.
    assert page.index("health-stuck") < page.index("health-ok")


def test_the_overview_poll_answers_with_the_table_partial_only(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    make_message(db, tenants.acme, now=NOW)
    partial = text(client, "/", headers={"HX-Request": "true"})
    assert partial.lstrip().startswith('<div id="overview-table"')
    assert "<html" not in partial
    assert 'hx-trigger="every 5s" data-poll' in partial  # static/dashboard.js skips hidden tabs


def test_the_overview_counts_the_last_hour_and_dead_letters_and_shows_a_pause_reason(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    sent_message(db, tenants.acme, "wamid.A", minute=5)
    failed_message(db, tenants.acme, minute=6)
    with db.transaction() as session:
        pause_identity(session, tenants.acme.identity_id, "190: token expired", NOW)
    page = text(client, "/")
    assert "1/0/0/1" in page
    assert "PAUSED" in page and "190: token expired" in page


def test_the_overview_says_what_an_empty_installation_means(app: Flask, db: Database) -> None:
    use_clock(app)
    make_staff(db, "root@ratchet.test", "admin", None)
    client = app.test_client()
    sign_in(client, "root@ratchet.test")
    assert "No identities yet" in text(client, "/")


def test_the_stuck_page_lists_messages_past_the_threshold_oldest_first_with_why(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    older = make_message(db, tenants.acme, now=NOW - timedelta(minutes=9))
    newer = make_message(db, tenants.acme, now=NOW - timedelta(minutes=2))
    make_message(db, tenants.acme, now=NOW - timedelta(seconds=10))  # not stuck yet
    page = text(client, "/stuck")
    assert page.index(f"#{older}") < page.index(f"#{newer}")
    assert "never claimed" in page
    assert page.count("never claimed") == 2


def test_the_stuck_page_says_a_paused_identity_holds_its_messages(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    make_message(db, tenants.acme, now=NOW - timedelta(minutes=5))
    with db.transaction() as session:
        pause_identity(session, tenants.acme.identity_id, "131031: account locked", NOW)
    assert "identity paused: 131031: account locked" in text(client, "/stuck")


def test_the_stuck_page_says_nothing_is_stuck_when_nothing_is(client: FlaskClient) -> None:
    assert "Nothing stuck" in text(client, "/stuck")


def test_a_dead_letter_shows_the_providers_words_verbatim_with_meaning_and_what_to_do(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    error = {
        "provider": "whatsapp",
        "http_status": 400,
        "code": 132001,
        "title": "Template name does not exist in the translation",
        "message": "(#132001) Template name does not exist in the translation",
        "details": "template name (order_update) does not exist in en_US",
        "trace_id": "AbC12xYz",
    }
    message_id = failed_message(db, tenants.acme, error=error, recipient="15557654321")
    page = text(client, "/dead-letters")
    assert f"#{message_id}" in page
    for verbatim in (error["title"], error["message"], error["details"], "AbC12xYz", "132001"):
        assert str(verbatim) in page
    assert "Template name or language not found." in page
    assert "Fix or replace the template in WhatsApp Manager, then requeue." in page
    assert "…4321" in page and "15557654321" not in page  # the phone masked
    assert "hello" not in page  # the body hidden


def test_dead_letters_are_filtered_by_class_code_identity_and_time(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    template = failed_message(db, tenants.acme, minute=1)
    window = failed_message(
        db,
        tenants.acme,
        failure_class="permanent",
        error={"provider": "whatsapp", "code": 131047, "title": "Re-engagement message"},
        minute=9,
    )
    by_class = text(client, "/dead-letters?class=permanent")
    assert f"#{window}" in by_class and f"#{template}<" not in by_class
    by_code = text(client, "/dead-letters?code=132001")
    assert f"#{template}" in by_code and f"#{window}<" not in by_code
    recent = text(client, "/dead-letters?period=1h")
    assert f"#{template}" in recent and f"#{window}" in recent
    ident = text(client, f"/dead-letters?identity={tenants.acme.identity_id}&code=1")
    assert "No dead letters match these filters." in ident


def test_dead_letters_are_paged_by_keyset_in_actionable_first_order(
    app: Flask, client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    app.config["RATCHET_PAGE_SIZE"] = 2
    permanent = failed_message(
        db,
        tenants.acme,
        failure_class="permanent",
        error={"provider": "whatsapp", "code": 131026, "title": "Message undeliverable"},
        minute=8,
    )
    exhausted = failed_message(
        db,
        tenants.acme,
        failure_class="exhausted",
        error={"provider": "whatsapp", "code": 131000, "title": "Something went wrong"},
        minute=1,
    )
    template = failed_message(db, tenants.acme, minute=2)
    first = text(client, "/dead-letters")
    assert first.index(f"#{exhausted}") < first.index(f"#{template}")
    # "#12<" and not "#12": an id can be the start of another one.
    assert f"#{permanent}<" not in first
    next_link = first.split('rel="next"')[0].rsplit('href="', 1)[1].split('"')[0]
    second = text(client, next_link.replace("&amp;", "&"))
    assert f"#{permanent}<" in second
    assert f"#{exhausted}<" not in second and f"#{template}<" not in second
    assert 'rel="next"' not in second


def test_the_message_page_tells_its_whole_story(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    message_id = failed_message(
        db,
        tenants.acme,
        error={"provider": "whatsapp", "code": 131026, "title": "Message undeliverable"},
        failure_class="permanent",
        key="order-5531",
    )
    page = text(client, f"/messages/{message_id}")
    assert "order-5531" in page  # the idempotency key
    assert "Message undeliverable" in page and "131026" in page
    assert "Check the number with the customer" in page  # what to do
    assert "Cycle 1" in page and "queued → sending" in page and "sending → failed" in page
    assert f"pk-{message_id}" in page  # the attempt's provider key
    assert "closed: the recipient has not written" in page  # the 24-hour window
    assert "text, 5 characters (hidden)" in page and ">hello<" not in page
    # A failed message is final: its status widget does not poll.
    widget = page.split('id="status-widget"')[1].split("</section>")[0]
    assert "hx-get" not in widget.split(">")[0]


def test_the_message_page_says_what_each_webhook_did_and_how_long_each_call_took(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    """A duplicate `sent` after the acceptance is not applied: the page says why, in words,
    beside the `delivered` that was applied."""
    message_id = sent_message(db, tenants.acme, "wamid.WORDS")
    raw = encode(
        status_body(
            [status("wamid.WORDS", "sent", T0), status("wamid.WORDS", "delivered", T0)],
            phone_number_id="1000001",
        )
    )
    answer = client.post(
        "/webhooks/whatsapp",
        data=raw,
        headers={
            "Content-Type": "application/json",
            "X-Hub-Signature-256": sign(raw, "app-secret-acme"),
        },
    )
    assert answer.status_code == 200
    page = text(client, f"/messages/{message_id}")
    webhooks = page.split('id="webhooks-h"')[1].split("</section>")[0]
    assert "not applied: the state machine refused it (the timeline says why)" in webhooks
    assert ">applied<" in webhooks
    attempts = page.split('id="attempts-h"')[1].split("</section>")[0]
    assert 'data-label="Took">0 ms<' in attempts  # started and answered at the same instant


@pytest.mark.parametrize(
    ("took", "shown"),
    [
        (timedelta(0), "0 ms"),
        (timedelta(milliseconds=87.4), "87 ms"),
        (timedelta(milliseconds=999.4), "999 ms"),
        (timedelta(milliseconds=999.6), "1.0 s"),
        (timedelta(seconds=59, milliseconds=960), "1 m"),
        (timedelta(seconds=4, milliseconds=240), "4.2 s"),
        (timedelta(seconds=59, milliseconds=900), "59.9 s"),
        (timedelta(minutes=2, seconds=5), "2 m 5 s"),
    ],
)
def test_a_call_s_time_is_shown_to_the_millisecond_under_a_second(
    took: timedelta, shown: str
) -> None:
    assert call_time(took) == shown


def test_every_result_a_status_is_stored_with_has_words_on_the_message_page() -> None:
    stored = {
        value for name, value in vars(Result).items() if name.isupper() and isinstance(value, str)
    }
    assert stored == set(STATUS_RESULTS)
    assert status_result(None) == "not applied yet"


def test_the_status_widget_of_a_message_still_on_its_way_polls_itself(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    message_id = sent_message(db, tenants.acme, "wamid.POLL")
    widget = text(client, f"/messages/{message_id}/status", headers={"HX-Request": "true"})
    assert widget.lstrip().startswith('<section id="status-widget"')
    assert f'hx-get="/messages/{message_id}/status"' in widget
    assert "every 3s" in widget


def test_search_by_provider_id_opens_the_one_message_it_names(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    message_id = sent_message(db, tenants.acme, "wamid.HBgLMTU1NTEyMzQ1Njc")
    response = client.get("/search?q=wamid.HBgLMTU1NTEyMzQ1Njc")
    assert response.status_code == 302
    assert response.headers["Location"] == f"/messages/{message_id}"


@pytest.mark.parametrize("query", ["order-77", "+1 555 000", "15550009"])
def test_search_by_idempotency_key_or_recipient_digits_finds_the_message(
    client: FlaskClient, db: Database, tenants: Tenants, query: str
) -> None:
    message_id = make_message(db, tenants.acme, recipient="15550009999", key="order-77", now=T0)
    response = client.get("/search", query_string={"q": query})
    assert response.headers["Location"] == f"/messages/{message_id}"


def test_search_lists_several_matches_and_says_when_there_are_none(
    client: FlaskClient, db: Database, tenants: Tenants
) -> None:
    first = make_message(db, tenants.acme, recipient="15550001111")
    second = make_message(db, tenants.acme, recipient="15550002222")
    listed = text(client, "/search?q=1555000")
    assert f"#{first}" in listed and f"#{second}" in listed
    assert "No message matches" in text(client, "/search?q=wamid.nothing")
