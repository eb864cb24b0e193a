"""The WhatsApp send call against a real local HTTP server, one scripted answer per case."""

from __future__ import annotations

import json

import pytest

from app.providers.base import Credentials, FailureClass, OutboundMessage, SendResult
from app.providers.whatsapp import WhatsAppProvider

from ..conftest import free_port
from .conftest import PHONE_NUMBER_ID, TOKEN, Answer, ScriptedServer, fixture_bytes, load_fixture

WHATSAPP = WhatsAppProvider()
TIMEOUT = 2.0

TEXT = OutboundMessage(
    recipient="16505551234",
    body_text="Your table for two is booked for 19:30.",
    provider_key="pk_01J0Y7Q5ZK_c1",
    correlation_id="ratchet:msg_01J0Y7Q5ZK:1",
)
TEMPLATE = OutboundMessage(
    recipient="16505551234",
    template={
        "name": "booking_reminder",
        "language": "en_US",
        "components": [{"type": "body", "parameters": [{"type": "text", "text": "19:30"}]}],
    },
    provider_key="pk_01J0Y7Q5ZL_c1",
    correlation_id="ratchet:msg_01J0Y7Q5ZL:1",
)


def graph_error(code: int, message: str, details: str = "", **extra: object) -> dict[str, object]:
    return {
        "error": {
            "message": message,
            "type": "OAuthException",
            "code": code,
            "error_data": {"messaging_product": "whatsapp", "details": details},
            "fbtrace_id": "AtHnp2dXHbzJ8v1uW3RqL9k",
            **extra,
        }
    }


def send(server: ScriptedServer, message: OutboundMessage = TEXT, timeout: float = TIMEOUT):
    return WHATSAPP.send(server.credentials(), message, timeout=timeout)


# 1. Success: the exact request, and the id from the answer


def test_it_sends_text_with_bearer_token_idempotency_key_and_correlation_id(
    provider_server: ScriptedServer,
) -> None:
    provider_server.answer(Answer(200, fixture_bytes("send_success.json")))

    result = send(provider_server)

    assert result.accepted
    assert result.provider_message_id == load_fixture("send_success.json")["messages"][0]["id"]
    assert result.failure is None and result.error is None and result.outcome_known
    assert result.http_status == 200
    assert result.response_body == fixture_bytes("send_success.json").decode()
    [request] = provider_server.requests
    assert request.method == "POST"
    assert request.path == f"/v21.0/{PHONE_NUMBER_ID}/messages"
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    assert request.headers["idempotency-key"] == "pk_01J0Y7Q5ZK_c1"
    assert request.headers["content-type"] == "application/json"
    assert request.json() == {
        "messaging_product": "whatsapp",
        "recipient_type": "individual",
        "to": "16505551234",
        "type": "text",
        "text": {"body": "Your table for two is booked for 19:30.", "preview_url": False},
        "biz_opaque_callback_data": "ratchet:msg_01J0Y7Q5ZK:1",
    }


def test_it_sends_a_template_with_language_code_and_components(
    provider_server: ScriptedServer,
) -> None:
    provider_server.answer(Answer(200, fixture_bytes("send_success.json")))

    result = send(provider_server, TEMPLATE)

    assert result.accepted
    [request] = provider_server.requests
    assert request.headers["idempotency-key"] == "pk_01J0Y7Q5ZL_c1"
    assert request.json() == {
        "messaging_product": "whatsapp",
        "recipient_type": "individual",
        "to": "16505551234",
        "type": "template",
        "template": {
            "name": "booking_reminder",
            "language": {"code": "en_US"},
            "components": [{"type": "body", "parameters": [{"type": "text", "text": "19:30"}]}],
        },
        "biz_opaque_callback_data": "ratchet:msg_01J0Y7Q5ZL:1",
    }


def test_it_refuses_a_correlation_id_longer_than_whatsapp_echoes(
    provider_server: ScriptedServer,
) -> None:
    message = OutboundMessage(
        recipient="16505551234", body_text="hi", provider_key="k", correlation_id="x" * 513
    )
    with pytest.raises(ValueError, match="512"):
        send(provider_server, message)
    assert provider_server.requests == []


def test_a_message_has_text_or_a_template_but_not_both() -> None:
    with pytest.raises(ValueError):
        OutboundMessage(recipient="1", provider_key="k", correlation_id="c")
    with pytest.raises(ValueError):
        OutboundMessage(
            recipient="1",
            body_text="a",
            template={"name": "t"},
            provider_key="k",
            correlation_id="c",
        )


def test_a_2xx_without_a_message_id_is_an_unknown_outcome(provider_server: ScriptedServer) -> None:
    provider_server.answer(Answer(200, {"messaging_product": "whatsapp", "messages": []}))

    result = send(provider_server)

    assert not result.accepted
    assert result.failure is FailureClass.UNKNOWN
    assert result.outcome_known is False


# 2. Provider error codes: one of each class, kept verbatim


@pytest.mark.parametrize(
    ("http_status", "code", "message", "expected", "outcome_known"),
    [
        (500, 131000, "(#131000) Something went wrong", FailureClass.UNKNOWN, False),
        (503, 131016, "(#131016) Service unavailable", FailureClass.UNKNOWN, False),
        # The code decides, not the HTTP status.
        (400, 131000, "(#131000) Something went wrong", FailureClass.UNKNOWN, False),
        (500, 131026, "(#131026) Message Undeliverable", FailureClass.PERMANENT, True),
        (429, 130429, "(#130429) Rate limit hit", FailureClass.RATE_LIMITED, True),
        (
            400,
            131056,
            "(#131056) (Business Account, Consumer Account) pair rate limit hit",
            FailureClass.PAIR_LIMITED,
            True,
        ),
        (400, 131026, "(#131026) Message Undeliverable", FailureClass.PERMANENT, True),
        (400, 131047, "(#131047) Re-engagement message", FailureClass.PERMANENT, True),
        (
            404,
            132001,
            "(#132001) Template name does not exist in the translation",
            FailureClass.NEEDS_HUMAN,
            True,
        ),
        (
            401,
            190,
            "Error validating access token: Session has expired",
            FailureClass.SENDER_BROKEN,
            True,
        ),
        (400, 999999, "(#999999) Something new", FailureClass.NEEDS_HUMAN, True),
    ],
)
def test_each_error_code_is_classified_and_kept_verbatim(
    provider_server: ScriptedServer,
    http_status: int,
    code: int,
    message: str,
    expected: FailureClass,
    outcome_known: bool,
) -> None:
    body = json.dumps(graph_error(code, message, details=f"details of {code}"))
    provider_server.answer(Answer(http_status, body))

    result = send(provider_server)

    assert not result.accepted
    assert result.failure is expected
    assert result.outcome_known is outcome_known
    assert result.http_status == http_status
    assert result.response_body == body
    assert result.retry_after is None
    error = result.error
    assert error is not None
    assert (error.provider, error.http_status, error.code) == ("whatsapp", http_status, code)
    assert error.message == message
    assert error.details == f"details of {code}"
    assert error.trace_id == "AtHnp2dXHbzJ8v1uW3RqL9k"
    assert error.raw == body
    if message.startswith("(#"):
        assert error.title == message.split(") ", 1)[1]


def test_the_documented_error_answer_is_read_whole(provider_server: ScriptedServer) -> None:
    raw = fixture_bytes("send_error.json")
    provider_server.answer(Answer(400, raw))

    result = send(provider_server)

    assert result.failure is FailureClass.PERMANENT
    assert result.error is not None
    assert result.error.to_dict() == {
        "provider": "whatsapp",
        "http_status": 400,
        "code": 131047,
        "subcode": None,
        "title": "Re-engagement message",
        "message": "(#131047) Re-engagement message",
        "details": load_fixture("send_error.json")["error"]["error_data"]["details"],
        "trace_id": "AtHnp2dXHbzJ8v1uW3RqL9k",
        "raw": raw.decode(),
    }


def test_an_explicit_title_and_subcode_are_kept(provider_server: ScriptedServer) -> None:
    body = graph_error(
        0, "Authentication Error", error_subcode=2494055, error_user_title="Token revoked"
    )
    provider_server.answer(Answer(401, body))

    result = send(provider_server)

    assert result.failure is FailureClass.SENDER_BROKEN
    assert result.error is not None
    assert (result.error.code, result.error.subcode) == (0, 2494055)
    assert result.error.title == "Token revoked"


def test_a_rate_limit_honours_retry_after_when_given(provider_server: ScriptedServer) -> None:
    body = graph_error(130429, "(#130429) Rate limit hit")
    provider_server.answer(Answer(429, body, headers={"Retry-After": "17"}))

    result = send(provider_server)

    assert result.failure is FailureClass.RATE_LIMITED
    assert result.retry_after == 17.0


def test_a_rate_limit_without_retry_after_leaves_the_wait_to_the_caller(
    provider_server: ScriptedServer,
) -> None:
    provider_server.answer(Answer(429, graph_error(80007, "(#80007) Rate limit issues")))

    result = send(provider_server)

    assert result.failure is FailureClass.RATE_LIMITED
    assert result.retry_after is None


# 3. No code: the HTTP status decides


@pytest.mark.parametrize(
    ("http_status", "expected", "outcome_known"),
    [
        (500, FailureClass.UNKNOWN, False),
        (503, FailureClass.UNKNOWN, False),
        (429, FailureClass.RATE_LIMITED, True),
        (401, FailureClass.SENDER_BROKEN, True),
        (403, FailureClass.SENDER_BROKEN, True),
        (400, FailureClass.NEEDS_HUMAN, True),
        (404, FailureClass.NEEDS_HUMAN, True),
    ],
)
def test_without_a_code_the_http_status_decides(
    provider_server: ScriptedServer, http_status: int, expected: FailureClass, outcome_known: bool
) -> None:
    body = '{"error": {"message": "no code here"}}'
    provider_server.answer(Answer(http_status, body))

    result = send(provider_server)

    assert result.failure is expected
    assert result.outcome_known is outcome_known
    assert result.error is not None
    assert result.error.code is None
    assert result.error.message == "no code here"
    assert result.error.raw == body


def test_a_non_json_502_is_unknown_with_its_body_kept(provider_server: ScriptedServer) -> None:
    html = "<html><body><h1>502 Bad Gateway</h1></body></html>"
    provider_server.answer(Answer(502, html, headers={"Content-Type": "text/html"}))

    result = send(provider_server)

    assert result.failure is FailureClass.UNKNOWN
    assert result.outcome_known is False
    assert result.error is not None
    assert (result.error.http_status, result.error.code, result.error.raw) == (502, None, html)
    assert result.response_body == html


# 4. No answer at all


def assert_no_answer(result: SendResult, outcome_known: bool, title: str) -> None:
    assert not result.accepted
    assert result.failure is FailureClass.UNKNOWN
    assert result.outcome_known is outcome_known
    assert result.http_status is None and result.response_body is None
    assert result.error is not None
    assert result.error.title == title
    assert result.error.raw  # the transport's description, kept for the person reading it


def test_a_server_that_answers_too_late_is_a_timeout_with_unknown_outcome(
    provider_server: ScriptedServer,
) -> None:
    provider_server.answer(Answer(200, fixture_bytes("send_success.json"), delay=5.0))

    # A second: connecting to the local server must fit in the deadline on a busy machine.
    result = send(provider_server, timeout=1.0)

    assert_no_answer(result, outcome_known=False, title="DeadlineExceededError")
    assert len(provider_server.requests) == 1  # it did reach the provider


def test_a_server_that_trickles_its_answer_is_cut_at_the_total_deadline(
    provider_server: ScriptedServer,
) -> None:
    # Every byte comes well within any per-read timeout; only a total deadline ends this.
    provider_server.answer(Answer(200, fixture_bytes("send_success.json"), trickle=0.02))

    result = send(provider_server, timeout=1.0)  # the answer takes about 5 s

    # Each byte beats any per-read timeout: only the total deadline ends it as a timeout.
    assert_no_answer(result, outcome_known=False, title="DeadlineExceededError")


def test_a_reset_connection_is_an_unknown_outcome(provider_server: ScriptedServer) -> None:
    provider_server.answer(Answer(reset=True))

    result = send(provider_server)

    assert_no_answer(result, outcome_known=False, title="ConnectionLostError")
    assert len(provider_server.requests) == 1


def test_a_refused_connection_is_unknown_but_provably_not_sent() -> None:
    nowhere = Credentials(
        account_id=PHONE_NUMBER_ID, base_url=f"http://127.0.0.1:{free_port()}/v21.0", token=TOKEN
    )

    result = WHATSAPP.send(nowhere, TEXT, timeout=TIMEOUT)

    assert_no_answer(result, outcome_known=True, title="ConnectFailedError")
