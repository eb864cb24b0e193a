"""The Twilio provider: the signature as Twilio documents it (cross-checked against the
official `twilio` package), the create call's form, its answers, and the callbacks."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twilio.request_validator import RequestValidator

from app.providers import classification, get_provider
from app.providers.base import Credentials, FailureClass, OutboundMessage, WebhookFormatError
from app.providers.twilio import (
    build_form,
    expected_signature,
    parse_callback,
    parse_error,
    parse_form,
    verify_request,
)

from .conftest import Answer, ScriptedServer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "twilio"
SID = "AC" + "0" * 32
TOKEN = "twilio-auth-token-not-for-logs"


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def outbound(**kwargs: Any) -> OutboundMessage:
    values: dict[str, Any] = {
        "recipient": "16505551234",
        "body_text": "hello",
        "provider_key": "pk-1",
        "correlation_id": "ratchet:7:1:abc",
    }
    values.update(kwargs)
    return OutboundMessage(**values)


def credentials(base_url: str = "https://api.twilio.com", **kwargs: Any) -> Credentials:
    values: dict[str, Any] = {
        "account_id": SID,
        "base_url": base_url,
        "token": TOKEN,
        "sender": "whatsapp:+14155238886",
        "status_callback_url": "https://ratchet.example/webhooks/twilio/5",
    }
    values.update(kwargs)
    return Credentials(**values)


# 1. The signature


def test_the_documented_worked_example_with_a_query_string_verifies() -> None:
    example = fixture("signature_example.json")
    params = list(example["params"].items())
    assert (
        expected_signature(example["url"], params, example["auth_token"]) == (example["signature"])
    )
    assert verify_request(example["url"], params, example["signature"], example["auth_token"])
    validator = RequestValidator(example["auth_token"])
    assert validator.validate(example["url"], example["params"], example["signature"])


form_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=20
)
names = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", min_size=1)


@given(
    params=st.dictionaries(names, form_text, max_size=8),
    query=st.dictionaries(names, form_text, max_size=3),
    token=st.text(min_size=1, max_size=40),
)
def test_our_signature_is_the_official_validators_for_any_form_and_query(
    params: dict[str, str], query: dict[str, str], token: str
) -> None:
    url = "https://ratchet.example/webhooks/twilio/5"
    if query:
        url += "?" + urlencode(query)
    ours = expected_signature(url, list(params.items()), token)
    validator = RequestValidator(token)
    assert ours == validator.compute_signature(url, params)
    assert validator.validate(url, params, ours)
    assert verify_request(url, list(params.items()), ours, token)


def test_a_tampered_field_another_url_or_another_token_does_not_verify() -> None:
    url = "https://ratchet.example/webhooks/twilio/5?c=ratchet%3A7%3A1%3Aabc"
    params = list(fixture("status_delivered.json").items())
    good = expected_signature(url, params, TOKEN)
    assert verify_request(url, params, good, TOKEN)
    tampered = [(k, "read" if k == "MessageStatus" else v) for k, v in params]
    assert not verify_request(url, tampered, good, TOKEN)
    assert not verify_request(url.replace("abc", "abd"), params, good, TOKEN)
    assert not verify_request(url.split("?")[0], params, good, TOKEN)
    assert not verify_request(url, params, good, "another-token")
    assert not verify_request(url, params, None, TOKEN)
    assert not verify_request(url, params, "", TOKEN)
    assert not verify_request(url, params, good, "")
    assert not verify_request(url, params, "ö" * 28, TOKEN)  # non-ASCII header: no crash


def test_a_default_port_added_or_dropped_still_verifies_as_the_official_validator_allows() -> None:
    params = [("MessageSid", "SM1"), ("MessageStatus", "sent")]
    signed_with_port = expected_signature("https://ratchet.example:443/w?x=1", params, TOKEN)
    assert verify_request("https://ratchet.example/w?x=1", params, signed_with_port, TOKEN)
    assert RequestValidator(TOKEN).validate(
        "https://ratchet.example/w?x=1", dict(params), signed_with_port
    )
    other_port = expected_signature("https://ratchet.example:8443/w?x=1", params, TOKEN)
    assert not verify_request("https://ratchet.example/w?x=1", params, other_port, TOKEN)


def test_the_provider_interface_refuses_a_check_without_the_url() -> None:
    provider = get_provider("twilio")
    raw = urlencode([("MessageSid", "SM1")]).encode()
    url = "https://ratchet.example/webhooks/twilio/5"
    signature = expected_signature(url, [("MessageSid", "SM1")], TOKEN)
    headers = {"X-Twilio-Signature": signature}
    assert provider.verify_signature(raw, headers, TOKEN, url=url)  # type: ignore[call-arg]
    assert not provider.verify_signature(raw, headers, TOKEN)


def test_a_body_that_is_not_form_data_is_a_format_error() -> None:
    with pytest.raises(WebhookFormatError):
        parse_form(b"\xff\xfe")
    assert parse_form(b"") == []
    assert parse_form(b"A=1&B=&A=2") == [("A", "1"), ("B", ""), ("A", "2")]


# 2. The create call


def test_the_form_names_the_whatsapp_addresses_the_body_and_the_signed_callback() -> None:
    form = dict(build_form(credentials(), outbound()))
    assert form["To"] == "whatsapp:+16505551234"
    assert form["From"] == "whatsapp:+14155238886"
    assert form["Body"] == "hello"
    callback = form["StatusCallback"]
    assert callback.startswith("https://ratchet.example/webhooks/twilio/5?c=")
    assert dict(parse_qsl(callback.split("?", 1)[1]))["c"] == "ratchet:7:1:abc"


def test_a_template_goes_as_a_content_sid_with_numbered_variables() -> None:
    template = {
        "name": "HX" + "1" * 32,
        "language": "en",
        "components": [
            {"type": "body", "parameters": [{"type": "text", "text": "Ada"}, {"text": "12"}]}
        ],
    }
    form = dict(build_form(credentials(), outbound(body_text=None, template=template)))
    assert form["ContentSid"] == template["name"]
    assert json.loads(form["ContentVariables"]) == {"1": "Ada", "2": "12"}
    assert "Body" not in form


def test_a_send_posts_the_form_with_basic_auth_and_reads_the_documented_answer(
    provider_server: ScriptedServer,
) -> None:
    provider_server.answer(Answer(201, fixture("send_success.json")))
    result = get_provider("twilio").send(
        credentials(f"http://127.0.0.1:{provider_server.port}"), outbound(), timeout=5
    )
    assert result.accepted and result.provider_message_id == "SM" + "X" * 32
    request = provider_server.requests[0]
    assert request.path == f"/2010-04-01/Accounts/{SID}/Messages.json"
    headers = request.headers
    assert headers["content-type"] == "application/x-www-form-urlencoded"
    assert headers["idempotency-key"] == "pk-1"
    assert headers["authorization"].startswith("Basic ")
    assert TOKEN not in request.body.decode()
    assert dict(parse_qsl(request.body.decode()))["To"] == "whatsapp:+16505551234"


def test_the_documented_error_is_kept_verbatim_and_classified(
    provider_server: ScriptedServer,
) -> None:
    provider_server.answer(Answer(400, (FIXTURES / "send_error.json").read_bytes()))
    result = get_provider("twilio").send(
        credentials(f"http://127.0.0.1:{provider_server.port}"), outbound(), timeout=5
    )
    assert not result.accepted and result.failure is FailureClass.PERMANENT
    assert result.error is not None
    assert result.error.code == 21211 and result.error.http_status == 400
    assert result.error.message == "Invalid 'To' Phone Number: +1555000XXXX"
    assert result.error.details == "https://www.twilio.com/docs/errors/21211"
    assert result.error.raw == (FIXTURES / "send_error.json").read_text()
    assert result.outcome_known


def test_a_5xx_without_a_body_is_an_unknown_outcome(provider_server: ScriptedServer) -> None:
    provider_server.answer(Answer(503, b"upstream gone"))
    result = get_provider("twilio").send(
        credentials(f"http://127.0.0.1:{provider_server.port}"), outbound(), timeout=5
    )
    assert result.failure is FailureClass.UNKNOWN and not result.outcome_known
    assert parse_error(503, "upstream gone", None).raw == "upstream gone"


# 3. Callbacks

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


def test_the_documented_callbacks_become_the_same_status_objects_as_whatsapps() -> None:
    update = parse_callback(fixture("status_delivered.json"), NOW, "ratchet:1:1:t")
    assert (update.provider_message_id, update.status) == ("SM" + "X" * 32, "delivered")
    assert update.routing_id == "AC" + "X" * 32 and update.recipient == "16505551234"
    assert update.correlation_id == "ratchet:1:1:t" and update.provider_time == NOW
    assert update.errors == []
    failed = parse_callback(fixture("status_undelivered.json"), NOW)
    assert failed.status == "undelivered" and failed.errors[0].code == 63016
    assert get_provider("twilio").classify(None, 63016) is FailureClass.PERMANENT


@pytest.mark.parametrize("missing", ["MessageSid", "MessageStatus", "AccountSid"])
def test_a_callback_without_its_identifying_fields_is_a_format_error(missing: str) -> None:
    fields = {k: v for k, v in fixture("status_read.json").items() if not k.startswith(missing)}
    if missing == "MessageSid":
        fields.pop("SmsSid")
    if missing == "MessageStatus":
        fields.pop("SmsStatus")
    with pytest.raises(WebhookFormatError):
        parse_callback(fields, NOW)


# 4. Classification

P, RL, SB, NH, U = (
    FailureClass.PERMANENT,
    FailureClass.RATE_LIMITED,
    FailureClass.SENDER_BROKEN,
    FailureClass.NEEDS_HUMAN,
    FailureClass.UNKNOWN,
)
EXPECTED = {
    20003: SB,
    20404: SB,
    20429: RL,
    20500: U,
    20503: U,
    21211: P,
    21408: P,
    21606: SB,
    21610: P,
    21611: RL,
    21612: P,
    21614: P,
    21617: P,
    21656: NH,
    30001: RL,
    30002: SB,
    30003: P,
    30004: P,
    30005: P,
    30006: P,
    30007: P,
    30008: P,
    63001: SB,
    63003: P,
    63007: SB,
    63016: P,
    63018: RL,
    63024: P,
    63049: P,
}


@pytest.mark.parametrize(("code", "expected"), sorted(EXPECTED.items()))
def test_every_twilio_code_has_its_class_a_meaning_and_an_action(
    code: int, expected: FailureClass
) -> None:
    assert classification.classify("twilio", 400, code) is expected
    described = classification.describe("twilio", code)
    assert described is not None
    assert described.meaning.strip() and described.action.strip()


def test_the_twilio_table_holds_exactly_the_codes_tested_here() -> None:
    assert set(classification.TWILIO) == set(EXPECTED)
