"""Reading WhatsApp status webhooks, and checking their signature over the raw bytes.

Payloads: the documented bodies in tests/fixtures/whatsapp (Meta's status webhook reference),
plus inline variations for batches, errors and malformed bodies.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from app.providers.base import ProviderError, WebhookFormatError
from app.providers.whatsapp import WhatsAppProvider

from .conftest import APP_SECRET, PHONE_NUMBER_ID, fixture_bytes, load_fixture

WHATSAPP = WhatsAppProvider()
WAMID = "wamid.HBgLMTY1MDU1NTEyMzQVAgARGBI5QTNDQTVCM0Q0Q0Q2RTY3RTcA"
FAILED_WAMID = "wamid.HBgLMTY1MDU1NTk4NzYVAgARGBIzRjI4QkQ1MTJFMEY3QjJBNTUA"


def sign(body: bytes, secret: str = APP_SECRET) -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"X-Hub-Signature-256": f"sha256={digest}"}


def envelope(*values: dict[str, Any], field: str = "messages") -> dict[str, Any]:
    changes = [{"value": value, "field": field} for value in values]
    return {"object": "whatsapp_business_account", "entry": [{"id": "1022", "changes": changes}]}


def value_for(phone_number_id: str, **parts: Any) -> dict[str, Any]:
    metadata = {"display_phone_number": "15550783881", "phone_number_id": phone_number_id}
    return {"messaging_product": "whatsapp", "metadata": metadata, **parts}


def status(wamid: str, name: str, timestamp: str = "1750263773", **extra: Any) -> dict[str, Any]:
    return {"id": wamid, "status": name, "timestamp": timestamp, "recipient_id": "1650", **extra}


# 1. Parsing


@pytest.mark.parametrize(
    ("fixture", "name", "timestamp", "correlation_id"),
    [
        ("status_sent.json", "sent", 1750263773, "ratchet:msg_01J0Y7Q5ZK"),
        ("status_delivered.json", "delivered", 1750263775, "ratchet:msg_01J0Y7Q5ZK"),
        ("status_read.json", "read", 1750263801, "ratchet:msg_01J0Y7Q5ZK"),
    ],
)
def test_it_reads_a_status_with_its_time_recipient_and_correlation_id(
    fixture: str, name: str, timestamp: int, correlation_id: str
) -> None:
    payload = load_fixture(fixture)

    batch = WHATSAPP.parse_webhook(payload)

    [update] = batch.statuses
    assert update.routing_id == PHONE_NUMBER_ID
    assert update.provider_message_id == WAMID
    assert update.status == name
    assert update.provider_time == datetime.fromtimestamp(timestamp, UTC)
    assert update.provider_time.tzinfo is UTC
    assert update.recipient == "16505551234"
    assert update.correlation_id == correlation_id
    assert update.errors == []
    assert update.raw == payload["entry"][0]["changes"][0]["value"]["statuses"][0]
    assert batch.inbound == [] and batch.errors == []


def test_a_failed_status_keeps_its_errors_verbatim() -> None:
    payload = load_fixture("status_failed.json")
    raw_error = payload["entry"][0]["changes"][0]["value"]["statuses"][0]["errors"][0]

    [update] = WHATSAPP.parse_webhook(payload).statuses

    assert (update.status, update.provider_message_id) == ("failed", FAILED_WAMID)
    assert update.correlation_id is None  # not echoed on failures in the documented sample
    [error] = update.errors
    assert error == ProviderError(
        provider="whatsapp",
        code=131047,
        title="Re-engagement message",
        message="Re-engagement message",
        details=raw_error["error_data"]["details"],
        raw=json.dumps(raw_error, ensure_ascii=False, separators=(",", ":")),
    )
    assert json.loads(error.raw or "") == raw_error


def test_an_older_error_shape_with_title_and_href_is_read() -> None:
    old = {"code": 131026, "title": "Message undeliverable.", "href": "https://developers..."}
    payload = envelope(value_for("7", statuses=[status("wamid.A", "failed", errors=[old])]))

    [update] = WHATSAPP.parse_webhook(payload).statuses

    [error] = update.errors
    assert (error.code, error.title, error.message, error.details) == (
        131026,
        "Message undeliverable.",
        None,
        None,
    )


def test_it_reads_an_inbound_message_as_the_customer_writing() -> None:
    payload = load_fixture("inbound_text.json")

    batch = WHATSAPP.parse_webhook(payload)

    [message] = batch.inbound
    assert message.routing_id == PHONE_NUMBER_ID
    assert message.sender == "16505551234"
    assert message.provider_message_id.startswith("wamid.")
    assert message.provider_time == datetime.fromtimestamp(1750263812, UTC)
    assert message.raw["text"]["body"] == "Yes, Tuesday at 10 works for me."
    assert batch.statuses == []


def test_a_batch_of_several_entries_changes_and_statuses_is_read_whole() -> None:
    payload = envelope(
        value_for("111", statuses=[status("wamid.A", "sent"), status("wamid.B", "read")]),
        value_for("222", statuses=[status("wamid.C", "delivered")]),
    )
    second_entry = copy.deepcopy(payload["entry"][0])
    second_entry["changes"] = [
        {"field": "messages", "value": value_for("111", statuses=[status("wamid.D", "failed")])}
    ]
    payload["entry"].append(second_entry)

    batch = WHATSAPP.parse_webhook(payload)

    assert [(s.routing_id, s.provider_message_id, s.status) for s in batch.statuses] == [
        ("111", "wamid.A", "sent"),
        ("111", "wamid.B", "read"),
        ("222", "wamid.C", "delivered"),
        ("111", "wamid.D", "failed"),
    ]
    assert WHATSAPP.routing_ids(payload) == ["111", "222"]


def test_unknown_fields_are_tolerated_and_kept_in_raw() -> None:
    item = status("wamid.A", "sent", pricing={"billable": True, "new_thing": 1}, future="x")
    payload = envelope(value_for("7", statuses=[item], brand_new={"a": 1}))
    payload["entry"][0]["shiny"] = True

    [update] = WHATSAPP.parse_webhook(payload).statuses

    assert update.raw["future"] == "x"


def test_errors_at_the_change_level_are_kept_on_the_batch() -> None:
    reported = {
        "code": 131000,
        "title": "Something went wrong",
        "message": "Something went wrong",
        "error_data": {"details": "Unable to process the request."},
    }
    payload = envelope(value_for("7", errors=[reported]))

    batch = WHATSAPP.parse_webhook(payload)

    [entry] = batch.errors
    assert entry.routing_id == "7"
    assert entry.raw == reported
    assert (entry.error.code, entry.error.title, entry.error.details) == (
        131000,
        "Something went wrong",
        "Unable to process the request.",
    )
    assert batch.statuses == [] and batch.inbound == []


def test_errors_on_an_inbound_message_are_kept() -> None:
    unsupported = {
        "from": "1650",
        "id": "wamid.IN",
        "timestamp": "1750263812",
        "type": "unsupported",
        "errors": [{"code": 131051, "title": "Message type unknown"}],
    }
    payload = envelope(value_for("7", messages=[unsupported]))

    [message] = WHATSAPP.parse_webhook(payload).inbound

    assert [e.code for e in message.errors] == [131051]


def test_other_subscriptions_parse_to_nothing_without_failing() -> None:
    template_update = {"event": "APPROVED", "message_template_id": 9, "message_template_name": "x"}
    payload = envelope(template_update, field="message_template_status_update")

    batch = WHATSAPP.parse_webhook(payload)

    assert (batch.statuses, batch.inbound, batch.errors) == ([], [], [])
    assert WHATSAPP.routing_ids(payload) == []


@pytest.mark.parametrize(
    "payload",
    [
        [],
        "whatsapp",
        {"entry": []},
        {"object": "page", "entry": []},
        {"object": "whatsapp_business_account"},
        {"object": "whatsapp_business_account", "entry": {"id": "1"}},
        {"object": "whatsapp_business_account", "entry": ["x"]},
        {"object": "whatsapp_business_account", "entry": [{"changes": "x"}]},
        envelope(value_for("7", statuses={"id": "wamid.A"})),
        envelope(value_for("7", statuses=[{"status": "sent", "timestamp": "1"}])),
        envelope(value_for("7", statuses=[status("wamid.A", "sent", timestamp="yesterday")])),
        envelope({"statuses": [status("wamid.A", "sent")]}),  # no phone_number_id to route by
        envelope(value_for("7", messages=[{"id": "wamid.B", "timestamp": "1"}])),
    ],
    ids=[
        "a list",
        "a string",
        "no object",
        "another object",
        "no entry",
        "entry not a list",
        "entry item not an object",
        "changes not a list",
        "statuses not a list",
        "status without id",
        "timestamp not unix seconds",
        "statuses without routing id",
        "inbound without sender",
    ],
)
def test_a_body_that_is_not_whatsapps_shape_is_refused(payload: Any) -> None:
    with pytest.raises(WebhookFormatError):
        WHATSAPP.parse_webhook(payload)


def test_routing_ids_refuse_a_body_that_is_not_whatsapps() -> None:
    with pytest.raises(WebhookFormatError):
        WHATSAPP.routing_ids({"object": "instagram", "entry": []})


# 2. Signatures, over the raw bytes


def test_a_correct_signature_verifies() -> None:
    body = fixture_bytes("status_sent.json")
    assert WHATSAPP.verify_signature(body, sign(body), APP_SECRET)


def test_the_header_name_is_matched_in_any_case() -> None:
    body = fixture_bytes("status_sent.json")
    [(_, value)] = sign(body).items()
    assert WHATSAPP.verify_signature(body, {"x-hub-signature-256": value}, APP_SECRET)
    assert WHATSAPP.verify_signature(body, {"X-HUB-SIGNATURE-256": value}, APP_SECRET)


def test_a_one_byte_change_fails() -> None:
    body = fixture_bytes("status_sent.json")
    headers = sign(body)
    tampered = body.replace(b'"sent"', b'"Sent"', 1)
    assert len(tampered) == len(body) and tampered != body
    assert not WHATSAPP.verify_signature(tampered, headers, APP_SECRET)


def test_the_wrong_secret_fails() -> None:
    body = fixture_bytes("status_read.json")
    assert not WHATSAPP.verify_signature(body, sign(body, "another-secret"), APP_SECRET)


def test_an_empty_secret_never_verifies() -> None:
    body = fixture_bytes("status_read.json")
    assert not WHATSAPP.verify_signature(body, sign(body, ""), "")


def test_a_missing_header_fails() -> None:
    body = fixture_bytes("status_read.json")
    assert not WHATSAPP.verify_signature(body, {}, APP_SECRET)
    assert not WHATSAPP.verify_signature(body, {"Content-Type": "application/json"}, APP_SECRET)


@pytest.mark.parametrize(
    "make_value",
    [
        lambda digest: digest,  # no prefix
        lambda digest: f"sha256:{digest}",
        lambda digest: "sha256=",
        lambda digest: "sha256=zz" + digest[2:],
        lambda digest: f"sha256={digest[:-1]}",
        lambda digest: f"sha256={digest}00",
        lambda digest: f"sha256=\u00e9{digest[1:]}",
        lambda digest: f"sha1={digest}",
    ],
    ids=[
        "no prefix",
        "wrong separator",
        "empty",
        "not hex",
        "too short",
        "too long",
        "non-ascii",
        "sha1 prefix on the sha256 header",
    ],
)
def test_a_malformed_header_fails(make_value: Any) -> None:
    body = fixture_bytes("status_delivered.json")
    digest = hmac.new(APP_SECRET.encode(), body, hashlib.sha256).hexdigest()
    headers = {"X-Hub-Signature-256": make_value(digest)}
    assert not WHATSAPP.verify_signature(body, headers, APP_SECRET)


def test_the_legacy_sha1_signature_alone_fails() -> None:
    body = fixture_bytes("status_delivered.json")
    legacy = hmac.new(APP_SECRET.encode(), body, hashlib.sha1).hexdigest()
    assert not WHATSAPP.verify_signature(body, {"X-Hub-Signature": f"sha1={legacy}"}, APP_SECRET)


def test_a_body_with_unusual_formatting_verifies_against_its_raw_bytes() -> None:
    # Indented, escaped (\u00e9 for é), keys in an unusual order: exactly what re-serialising
    # parsed JSON would change.
    raw = (
        b'{\n    "entry": [ {"changes": [ {"field": "messages",\n'
        b'      "value": {"statuses": [{"timestamp": "1750263773", "status": "sent",\n'
        b'        "recipient_id": "1650", "id": "wamid.A",\n'
        b'        "biz_opaque_callback_data": "caf\\u00e9 \\ud83d\\ude00"}],\n'
        b'      "metadata": {"phone_number_id": "7", "display_phone_number": "1555"},\n'
        b'      "messaging_product": "whatsapp"}}], "id": "1022"}],\n'
        b'  "object":   "whatsapp_business_account"\n}\n'
    )
    payload = json.loads(raw)
    reserialised = json.dumps(payload).encode()
    assert reserialised != raw

    assert WHATSAPP.verify_signature(raw, sign(raw), APP_SECRET)
    assert not WHATSAPP.verify_signature(reserialised, sign(raw), APP_SECRET)
    [update] = WHATSAPP.parse_webhook(payload).statuses
    assert update.correlation_id == "caf\u00e9 \U0001f600"
