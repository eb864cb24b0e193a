"""The shared field readers of `app/providers/parsing.py`, and the error text they put
into a webhook's answer."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.datastructures import Headers

from app.db import Database
from app.providers import parsing
from app.providers.base import WebhookFormatError
from app.providers.meta_messaging import MetaMessagingProvider
from app.providers.whatsapp import WhatsAppProvider

from ..factories import make_world
from ..meta import PHONE_NUMBER_ID, encode, sign, status, status_body

AT = datetime(2025, 12, 1, 12, 0, tzinfo=UTC)
SECRET = "parsing-app-secret"


def format_error(call: Any, *args: Any) -> str:
    with pytest.raises(WebhookFormatError) as caught:
        call(*args)
    return str(caught.value)


# header


@pytest.mark.parametrize("asked", ["x-hub-signature-256", "X-Hub-Signature-256"])
def test_a_header_is_found_whatever_the_case_on_either_side(asked: str) -> None:
    sent = {"X-HUB-Signature-256": "sha256=ab", "Content-Type": "application/json"}
    assert parsing.header(sent, asked) == "sha256=ab"
    assert parsing.header(Headers(list(sent.items())), asked) == "sha256=ab"


def test_an_absent_header_is_none() -> None:
    assert parsing.header({"Content-Type": "application/json"}, "x-twilio-signature") is None


def test_an_empty_header_is_empty_not_absent() -> None:
    assert parsing.header({"x-twilio-signature": ""}, "x-twilio-signature") == ""


# object_at and list_at


@pytest.mark.parametrize("value", [None, [], ["a"], "{}", 1, True])
def test_anything_but_an_object_is_named_by_its_path(value: Any) -> None:
    assert format_error(parsing.object_at, value, "entry[2]") == "entry[2] is not an object"


def test_an_object_is_given_back_as_it_is() -> None:
    value = {"id": "1"}
    assert parsing.object_at(value, "entry[0]") is value


@pytest.mark.parametrize("container", [{}, {"statuses": None}])
def test_an_absent_or_null_list_is_empty(container: dict[str, Any]) -> None:
    assert parsing.list_at(container, "statuses", "entry[0]") == []


@pytest.mark.parametrize("value", [{}, "[]", 0, False, {"0": "a"}])
def test_anything_but_a_list_is_named_by_its_path_and_key(value: Any) -> None:
    error = format_error(parsing.list_at, {"statuses": value}, "statuses", "v")
    assert error == "v.statuses is not a list"


def test_a_list_is_given_back_as_it_is_whatever_it_holds() -> None:
    value = ["a", 1, None]
    assert parsing.list_at({"statuses": value}, "statuses", "v") is value


# required_str


@pytest.mark.parametrize(
    "raw",
    [
        {},
        {"id": None},
        {"id": ""},
        {"id": True},
        {"id": False},
        {"id": 1.5},
        {"id": 2.0},
        {"id": {}},
        {"id": {"x": "1"}},
        {"id": []},
        {"id": ["1"]},
    ],
)
def test_an_id_that_is_absent_empty_or_not_a_string_or_whole_number_is_missing(
    raw: dict[str, Any],
) -> None:
    assert format_error(parsing.required_str, raw, "id", "entry[0]") == "entry[0].id missing"


@pytest.mark.parametrize(("value", "text"), [("wamid.X", "wamid.X"), (" ", " "), (0, "0")])
def test_a_string_or_a_whole_number_is_an_id(value: Any, text: str) -> None:
    assert parsing.required_str({"id": value}, "id", "p") == text


# str_or_none, int_or_none, json_or_none


@pytest.mark.parametrize(
    ("value", "text"),
    [(None, None), ({}, None), ([], None), ("", ""), ("a", "a"), (12, "12"), (False, "False")],
)
def test_str_or_none_gives_scalars_as_text(value: Any, text: str | None) -> None:
    assert parsing.str_or_none(value) == text


@pytest.mark.parametrize(
    ("value", "number"),
    [
        (131047, 131047),
        ("131047", 131047),
        (2.9, 2),
        (True, None),
        ("1.5", None),
        (None, None),
        ("", None),
        ([], None),
        (float("inf"), None),
        (float("nan"), None),
    ],
)
def test_int_or_none_takes_numbers_and_whole_number_text(value: Any, number: int | None) -> None:
    assert parsing.int_or_none(value) == number


@pytest.mark.parametrize(
    ("text", "document"),
    [('{"a": [1]}', {"a": [1]}), ("null", None), ("<html>502</html>", None), ("", None)],
)
def test_json_or_none(text: str, document: Any) -> None:
    assert parsing.json_or_none(text) == document


# The providers name the bad field by its path in the payload.


def test_whatsapp_names_the_status_whose_id_is_not_an_id() -> None:
    body = status_body([status("wamid.OK", "delivered", AT), status("wamid.X", "read", AT)])
    body["entry"][0]["changes"][0]["value"]["statuses"][1]["id"] = True
    error = format_error(WhatsAppProvider().parse_webhook, body)
    assert error == "entry[0].changes[0].value.statuses[1].id missing"


def test_messenger_names_the_entry_whose_events_are_not_a_list() -> None:
    body = {"object": "page", "entry": [{"id": "1067", "time": 1, "messaging": {"a": 1}}]}
    error = format_error(MetaMessagingProvider("messenger", "page").parse_webhook, body)
    assert error == "entry[0].messaging is not a list"


# And a webhook answers with that text.


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    app.config["PROPAGATE_EXCEPTIONS"] = False
    return app.test_client()


def test_a_signed_whatsapp_delivery_with_a_bad_field_is_kept_and_answered_with_its_path(
    client: FlaskClient, db: Database
) -> None:
    make_world(db, account_id=PHONE_NUMBER_ID, app_secret=SECRET)
    body = status_body([status("wamid.X", "delivered", AT)])
    body["entry"][0]["changes"][0]["value"]["statuses"][0]["status"] = ["delivered"]
    raw = encode(body)
    response = client.post(
        "/webhooks/whatsapp",
        data=raw,
        headers={"Content-Type": "application/json", "x-hub-signature-256": sign(raw, SECRET)},
    )
    assert response.status_code == 202, response.get_data(as_text=True)
    answer = response.get_json()
    assert answer["received"] == 0 and isinstance(answer["stored"], int)
    assert answer["error"] == "not understood: entry[0].changes[0].value.statuses[0].status missing"


@pytest.mark.parametrize("entry_id", [True, [], "", 1.5])
def test_a_messenger_delivery_whose_page_id_is_not_an_id_is_a_400_naming_it(
    client: FlaskClient, entry_id: Any
) -> None:
    body = {"object": "page", "entry": [{"id": entry_id, "time": 1, "messaging": []}]}
    response = client.post("/webhooks/messenger", json=body)
    assert response.status_code == 400
    assert response.get_json()["error"] == "not a messenger webhook: entry[0].id missing"


def test_a_messenger_delivery_whose_entry_is_not_an_object_is_a_400_naming_it(
    client: FlaskClient,
) -> None:
    response = client.post("/webhooks/messenger", json={"object": "page", "entry": ["1067"]})
    assert response.status_code == 400
    assert response.get_json()["error"] == "not a messenger webhook: entry[0] is not an object"
