"""The sandbox's Twilio Messages API, held to Twilio's documented shapes (tests/fixtures/
twilio/) and checked with the official `twilio` package's validator, not our own code."""

import base64
import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import httpx
import pytest
from twilio.request_validator import RequestValidator

from .conftest import SandboxClient, WebhookReceiver

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "twilio"
SID = "AC" + "1" * 32
TOKEN = "sandbox-auth-token"
SENDER = "whatsapp:+15550100000"


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def register(sandbox: SandboxClient, **settings: Any) -> dict[str, Any]:
    body = {"account_sid": SID, "auth_token": TOKEN, "senders": [SENDER], **settings}
    response = sandbox.http.post("/_sandbox/twilio/accounts", json=body)
    assert response.status_code in (200, 201), response.text
    return response.json()


def create(
    sandbox: SandboxClient, to: str, callback: str | None = None, token: str = TOKEN, **form: str
) -> httpx.Response:
    data = {"To": f"whatsapp:+{to}", "From": SENDER, "Body": "hello", **form}
    if callback:
        data["StatusCallback"] = callback
    auth = base64.b64encode(f"{SID}:{token}".encode()).decode()
    return sandbox.http.post(
        f"/2010-04-01/Accounts/{SID}/Messages.json",
        data=data,
        headers={"Authorization": f"Basic {auth}", "Idempotency-Key": "k-1"},
    )


def forms(receiver: WebhookReceiver, count: int) -> list[dict[str, str]]:
    return [dict(parse_qsl(h.body.decode())) for h in receiver.wait_for(count)]


def test_a_create_answers_the_documented_message_resource(sandbox: SandboxClient) -> None:
    register(sandbox)
    response = create(sandbox, "16505551234")
    assert response.status_code == 201
    answer = response.json()
    assert set(answer) == set(fixture("send_success.json"))
    assert answer["status"] == "queued" and answer["direction"] == "outbound-api"
    assert answer["sid"].startswith("SM") and len(answer["sid"]) == 34
    assert answer["to"] == "whatsapp:+16505551234" and answer["from"] == SENDER


@pytest.mark.parametrize(
    ("to", "code", "status"),
    [("15550000005", 21211, 400), ("15550000006", 21610, 400), ("15550000008", 20003, 401)],
)
def test_errors_answer_the_documented_error_shape(
    sandbox: SandboxClient, to: str, code: int, status: int
) -> None:
    register(sandbox)
    response = create(sandbox, to)
    assert response.status_code == status
    assert set(response.json()) == set(fixture("send_error.json"))
    assert response.json()["code"] == code
    assert response.json()["more_info"].endswith(f"/errors/{code}")


def test_a_wrong_token_or_an_unknown_sender_is_refused_and_nothing_recorded(
    sandbox: SandboxClient,
) -> None:
    register(sandbox)
    assert create(sandbox, "16505551234", token="wrong").json()["code"] == 20003
    assert create(sandbox, "16505551234", From="whatsapp:+19990000000").json()["code"] == 21606
    assert create(sandbox, "16505551234", Body="").json()["code"] == 21602
    messages = sandbox.http.get(f"/_sandbox/twilio/accounts/{SID}/messages").json()
    assert messages == {"messages": []}
    logged = sandbox.http.get(f"/_sandbox/twilio/requests?account_sid={SID}").json()["requests"]
    assert [r["outcome"] for r in logged] == ["rejected"] * 3
    assert all(r["headers"]["Authorization"] == "[redacted]" for r in logged)


def test_callbacks_are_signed_as_twilio_documents_over_the_url_with_its_query(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    register(sandbox)
    callback = receiver.url + "?c=ratchet%3A1%3A1%3Aabc"
    sid = create(sandbox, "16505551234", callback).json()["sid"]
    hooks = receiver.wait_for(3)
    validator = RequestValidator(TOKEN)
    for hook in hooks:
        fields = dict(parse_qsl(hook.body.decode()))
        assert validator.validate(callback, fields, hook.headers["X-Twilio-Signature"])
        assert hook.path.endswith("?c=ratchet%3A1%3A1%3Aabc")
        # Every field a documented callback has that Ratchet reads.
        assert {"AccountSid", "MessageSid", "MessageStatus", "From", "To"} <= set(fields)
        assert fields["MessageSid"] == sid and fields["AccountSid"] == SID
    assert [f["MessageStatus"] for f in forms(receiver, 3)] == ["sent", "delivered", "read"]


def test_a_failure_callback_carries_its_error_code(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    register(sandbox)
    create(sandbox, "15550000009", receiver.url)
    sent, undelivered = forms(receiver, 2)
    assert sent["MessageStatus"] == "sent" and "ErrorCode" not in sent
    assert (undelivered["MessageStatus"], undelivered["ErrorCode"]) == ("undelivered", "30003")
    assert set(undelivered) <= set(fixture("status_undelivered.json")) | {"SmsSid"}


def test_callbacks_come_late_duplicated_and_shuffled_on_request(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    register(sandbox, callback_delay_ms=400, duplicate_callbacks=True)
    started = time.monotonic()
    create(sandbox, "16505551234", receiver.url)
    hooks = receiver.wait_for(6)
    assert hooks[0].at - started >= 0.4
    statuses = [dict(parse_qsl(h.body.decode()))["MessageStatus"] for h in hooks]
    assert statuses == ["sent", "sent", "delivered", "delivered", "read", "read"]

    orders = set()
    for seed in range(6):
        receiver.received.clear()
        register(sandbox, shuffle_callbacks=True, seed=seed)
        create(sandbox, "16505551234", receiver.url)
        orders.add(tuple(f["MessageStatus"] for f in forms(receiver, 3)))
    assert len(orders) > 1  # shuffled: not always the same order
    assert all(sorted(order) == ["delivered", "read", "sent"] for order in orders)


def test_no_callback_without_a_status_callback_and_none_for_a_rejected_send(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    register(sandbox)
    create(sandbox, "16505551234")
    create(sandbox, "15550000005", receiver.url)
    time.sleep(0.3)
    assert receiver.snapshot() == []


def test_keys_are_ignored_as_by_twilio_unless_the_account_honours_them(
    sandbox: SandboxClient,
) -> None:
    register(sandbox)
    first, second = create(sandbox, "16505551234"), create(sandbox, "16505551234")
    assert first.json()["sid"] != second.json()["sid"]
    register(sandbox, honour_idempotency_keys=True)
    third, fourth = create(sandbox, "16505551234"), create(sandbox, "16505551234")
    assert third.json()["sid"] == fourth.json()["sid"]
    messages = sandbox.http.get(f"/_sandbox/twilio/accounts/{SID}/messages").json()["messages"]
    assert len(messages) == 3


def test_inbound_posts_a_signed_incoming_message_to_the_accounts_inbound_url(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    register(sandbox, inbound_url=receiver.url)
    response = sandbox.http.post(
        f"/_sandbox/twilio/accounts/{SID}/inbound", json={"from": "16505551234", "text": "hi"}
    )
    assert response.status_code == 202
    (hook,) = receiver.wait_for(1)
    fields = dict(parse_qsl(hook.body.decode()))
    assert RequestValidator(TOKEN).validate(
        receiver.url, fields, hook.headers["X-Twilio-Signature"]
    )
    assert set(fields) == set(fixture("inbound_text.json"))
    assert (fields["From"], fields["Body"], fields["To"]) == ("whatsapp:+16505551234", "hi", SENDER)


def test_the_control_api_refuses_bad_settings_and_lists_accounts(sandbox: SandboxClient) -> None:
    bad = sandbox.http.post("/_sandbox/twilio/accounts", json={"account_sid": "nope"})
    assert bad.status_code == 400 and bad.json()["error"] == "invalid account"
    register(sandbox)
    listed = sandbox.http.get("/_sandbox/twilio/accounts").json()["accounts"]
    assert [a["account_sid"] for a in listed] == [SID]
    patched = sandbox.http.patch(f"/_sandbox/twilio/accounts/{SID}", json={"statuses": ["read"]})
    assert patched.status_code == 200 and patched.json()["statuses"] == ["read"]
    assert sandbox.http.get("/_sandbox/twilio/accounts/AC9").status_code == 404
    assert sandbox.http.post("/_sandbox/reset").status_code == 200
    assert sandbox.http.get("/_sandbox/twilio/accounts").json()["accounts"] == []
