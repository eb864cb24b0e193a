"""The Cloud API send endpoint: success and error bodies, auth, validation, idempotency, pacing."""

import re
from typing import Any

import httpx
import pytest

from .conftest import SandboxClient, WebhookReceiver
from .support import wait_until

TEXT = {
    "messaging_product": "whatsapp",
    "to": "+16505551234",
    "type": "text",
    "text": {"body": "Your order has shipped."},
}


def assert_meta_error(response: httpx.Response, http_status: int, code: int) -> dict[str, Any]:
    assert response.status_code == http_status
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert error["code"] == code
    assert error["type"] == "OAuthException"
    assert re.fullmatch(rf"\(#{code}\) .+", error["message"])
    assert error["error_data"]["messaging_product"] == "whatsapp"
    assert isinstance(error["error_data"]["details"], str) and error["error_data"]["details"]
    assert isinstance(error["fbtrace_id"], str) and error["fbtrace_id"]
    return error


def test_it_accepts_a_text_message_and_answers_like_meta(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url)

    response = sandbox.send(number, body=TEXT)

    assert response.status_code == 200
    body = response.json()
    assert body["messaging_product"] == "whatsapp"
    assert body["contacts"] == [{"input": "+16505551234", "wa_id": "16505551234"}]
    wamid = body["messages"][0]["id"]
    assert wamid.startswith("wamid.")
    [message] = sandbox.messages(number)
    assert message["wamid"] == wamid
    assert message["to"] == "+16505551234"
    assert message["body"] == TEXT
    assert message["headers"]["Authorization"] == "Bearer EAAG-test-token"
    assert isinstance(message["time"], float)


def test_it_accepts_a_template_message(sandbox: SandboxClient, receiver: WebhookReceiver) -> None:
    number = sandbox.register(receiver.url)
    template = {
        "messaging_product": "whatsapp",
        "to": "16505551234",
        "type": "template",
        "template": {"name": "order_shipped", "language": {"code": "en_US"}},
    }

    response = sandbox.send(number, body=template)

    assert response.status_code == 200
    assert sandbox.messages(number)[0]["body"]["template"]["name"] == "order_shipped"


def test_it_refuses_a_wrong_token_with_code_190(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url)

    response = sandbox.send(number | {"token": "stolen"})

    assert_meta_error(response, 401, 190)
    assert "invalid_token" in response.headers["www-authenticate"]
    assert sandbox.messages(number) == []


def test_it_refuses_a_missing_authorization_header(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url)

    response = sandbox.http.post(f"/v21.0/{number['phone_number_id']}/messages", json=TEXT)

    assert_meta_error(response, 401, 190)


def test_it_answers_code_100_for_an_unknown_phone_number_id(sandbox: SandboxClient) -> None:
    response = sandbox.http.post(
        "/v19.0/999999/messages", json=TEXT, headers={"Authorization": "Bearer x"}
    )

    assert_meta_error(response, 400, 100)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({k: v for k, v in TEXT.items() if k != "messaging_product"}, 131008),
        (TEXT | {"messaging_product": "sms"}, 100),
        ({k: v for k, v in TEXT.items() if k != "to"}, 131008),
        (TEXT | {"to": 16505551234}, 100),
        ({k: v for k, v in TEXT.items() if k != "type"}, 131008),
        (TEXT | {"type": "image", "image": {"link": "https://example.com/a.png"}}, 100),
        (TEXT | {"text": {}}, 131008),
        (TEXT | {"text": {"body": ""}}, 100),
        (TEXT | {"type": "template", "template": {"name": "x"}}, 131008),
        (TEXT | {"type": "template", "template": {"language": {"code": "en"}}}, 131008),
        (TEXT | {"biz_opaque_callback_data": "x" * 513}, 100),
    ],
    ids=[
        "no-messaging-product",
        "wrong-messaging-product",
        "no-to",
        "to-not-a-string",
        "no-type",
        "unsupported-type",
        "text-without-body",
        "empty-body",
        "template-without-language",
        "template-without-name",
        "callback-data-too-long",
    ],
)
def test_it_rejects_an_invalid_body_with_metas_code(
    sandbox: SandboxClient, receiver: WebhookReceiver, body: dict[str, Any], code: int
) -> None:
    number = sandbox.register(receiver.url)

    response = sandbox.send(number, body=body)

    assert_meta_error(response, 400, code)
    assert sandbox.messages(number) == []


def test_it_rejects_a_body_that_is_not_json(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url)

    response = sandbox.http.post(
        f"/v21.0/{number['phone_number_id']}/messages",
        content=b"to=16505551234",
        headers={"Authorization": "Bearer EAAG-test-token"},
    )

    assert_meta_error(response, 400, 100)


def test_it_ignores_idempotency_keys_by_default_like_the_real_api(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url)

    first = sandbox.send(number, key="outbox-1")
    second = sandbox.send(number, key="outbox-1")

    assert first.json()["messages"][0]["id"] != second.json()["messages"][0]["id"]
    messages = sandbox.messages(number)
    assert [m["idempotency_key"] for m in messages] == ["outbox-1", "outbox-1"]
    assert all(m["headers"]["Idempotency-Key"] == "outbox-1" for m in messages)
    receiver.wait_for(6)


def test_it_replays_the_original_answer_when_it_honours_idempotency_keys(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url, honour_idempotency_keys=True)

    first = sandbox.send(number, key="outbox-1")
    replay = sandbox.send(number, key="outbox-1")
    other = sandbox.send(number, key="outbox-2")

    assert replay.status_code == 200
    assert replay.json() == first.json()
    assert other.json()["messages"][0]["id"] != first.json()["messages"][0]["id"]
    assert [m["idempotency_key"] for m in sandbox.messages(number)] == ["outbox-1", "outbox-2"]
    outcomes = [r["outcome"] for r in sandbox.requests(number)]
    assert outcomes == ["accepted", "replayed", "accepted"]
    # Only the two real messages get webhooks.
    receiver.wait_for(6)
    wait_until(lambda: len(sandbox.webhooks(number)) == 6, what="the webhook log")


def test_it_answers_130429_above_the_rate_limit_and_recovers_after_a_second(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url, rate_limit_mps=3, statuses=[])

    answers = [sandbox.send(number) for _ in range(5)]

    assert [a.status_code for a in answers] == [200, 200, 200, 429, 429]
    assert_meta_error(answers[3], 429, 130429)
    assert len(sandbox.messages(number)) == 3
    wait_until(lambda: sandbox.send(number).status_code == 200, 3, "the window to slide")


def test_it_answers_131056_to_a_second_send_to_one_recipient_within_the_pair_limit(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url, pair_limit_seconds=0.5, statuses=[])

    first = sandbox.send(number, to="+16505550001")
    again = sandbox.send(number, to="16505550001")  # the same wa_id, written otherwise
    other = sandbox.send(number, to="16505550002")  # another recipient is not limited

    assert [first.status_code, again.status_code, other.status_code] == [200, 400, 200]
    assert_meta_error(again, 400, 131056)
    assert len(sandbox.messages(number)) == 2
    wait_until(
        lambda: sandbox.send(number, to="16505550001").status_code == 200, 3, "the pair limit"
    )


def test_it_holds_every_answer_for_the_numbers_answer_delay(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url, answer_delay_ms=60_000, statuses=[])
    with pytest.raises(httpx.ReadTimeout):
        sandbox.send(number, timeout=0.5)
    assert len(sandbox.messages(number)) == 1  # decided at once, answered late
    sandbox.patch(number["phone_number_id"], answer_delay_ms=0)
    assert sandbox.send(number).status_code == 200


def test_it_logs_every_send_request_whatever_its_outcome(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url, statuses=[])

    sandbox.send(number)
    sandbox.send(number | {"token": "wrong"})
    sandbox.send(number, to="15550000005")

    log = sandbox.requests(number)
    assert [(r["outcome"], r["http_status"], r["error_code"]) for r in log] == [
        ("accepted", 200, None),
        ("rejected", 401, 190),
        ("rejected", 400, 131026),
    ]
    assert log[2]["fault"] == "undeliverable"
    assert log[0]["wamid"] == sandbox.messages(number)[0]["wamid"]
    assert log[0]["body"]["to"] == "16505551234"
