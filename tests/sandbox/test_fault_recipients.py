"""Magic recipients, like a payment sandbox's test cards: each one's raw answer."""

import json
import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest

from .conftest import SandboxClient, WebhookReceiver
from .support import statuses_in, wait_until

SHORT_TIMEOUT = httpx.Timeout(0.3)


def test_it_accepts_then_hangs_so_the_client_times_out(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url, hang_seconds=1)

    with pytest.raises(httpx.TimeoutException):
        sandbox.send(number, to="15550000001", timeout=0.3)

    # The client never learnt the wamid, yet the message exists and its webhooks arrive.
    [message] = sandbox.messages(number)
    hooks = receiver.wait_for(3)
    assert {s["id"] for h in hooks for s in statuses_in(h.body)} == {message["wamid"]}


def test_it_answers_the_hung_send_late_to_a_patient_client(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url, hang_seconds=0.5)
    started = time.monotonic()

    response = sandbox.send(number, to="15550000001", timeout=5)

    assert time.monotonic() - started >= 0.5
    assert response.status_code == 200
    assert response.json()["messages"][0]["id"] == sandbox.messages(number)[0]["wamid"]


def test_it_replays_a_hung_send_at_once_when_it_honours_the_key(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url, hang_seconds=1, honour_idempotency_keys=True)

    with pytest.raises(httpx.TimeoutException):
        sandbox.send(number, to="15550000001", key="outbox-7", timeout=0.3)
    retry = sandbox.send(number, to="15550000001", key="outbox-7", timeout=0.5)

    [message] = sandbox.messages(number)
    assert retry.json()["messages"][0]["id"] == message["wamid"]


def test_it_sends_again_on_a_retry_when_it_ignores_the_key(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url, hang_seconds=1)

    for _ in range(2):
        with pytest.raises(httpx.TimeoutException):
            sandbox.send(number, to="15550000001", key="outbox-7", timeout=0.3)

    # The real API's danger: two messages reached the customer.
    assert len({m["wamid"] for m in sandbox.messages(number)}) == 2


def test_it_resets_the_connection_after_accepting(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url)

    with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
        sandbox.send(number, to="+15550000002")

    [message] = sandbox.messages(number)
    assert message["to"] == "+15550000002"
    hooks = receiver.wait_for(3)
    assert {s["id"] for h in hooks for s in statuses_in(h.body)} == {message["wamid"]}
    assert sandbox.requests(number)[0]["answer"] == "reset"


def test_the_reset_is_a_tcp_rst_not_a_clean_close(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url, statuses=[])
    url = urlsplit(sandbox.url)
    body = json.dumps(
        {
            "messaging_product": "whatsapp",
            "to": "15550000002",
            "type": "text",
            "text": {"body": "x"},
        }
    ).encode()
    request = (
        f"POST /v21.0/{number['phone_number_id']}/messages HTTP/1.1\r\n"
        f"Host: {url.netloc}\r\nAuthorization: Bearer {number['token']}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body

    with socket.create_connection((url.hostname, url.port), timeout=5) as conn:
        conn.sendall(request)
        with pytest.raises(ConnectionResetError):
            conn.recv(1024)


@pytest.mark.parametrize("with_key", [True, False], ids=["per-key", "per-body"])
def test_it_answers_503_twice_per_message_then_accepts(
    sandbox: SandboxClient, receiver: WebhookReceiver, with_key: bool
) -> None:
    number = sandbox.register(receiver.url, statuses=[])
    key = "outbox-3" if with_key else None

    answers = [sandbox.send(number, to="15550000003", key=key) for _ in range(3)]

    assert [a.status_code for a in answers] == [503, 503, 200]
    assert answers[0].json()["error"]["code"] == 131016
    assert len(sandbox.messages(number)) == 1
    # Another message (another key, or another body) starts its own count.
    other = sandbox.send(
        number,
        to="15550000003",
        key="outbox-4" if with_key else None,
        text={"body": "A different message."},
    )
    assert other.status_code == 503


def test_it_answers_429_with_retry_after_once_per_message(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url, statuses=[])

    first = sandbox.send(number, to="15550000004", key="outbox-4")
    second = sandbox.send(number, to="15550000004", key="outbox-4")

    assert first.status_code == 429
    assert first.headers["retry-after"] == "2"
    assert first.json()["error"]["code"] == 130429
    assert second.status_code == 200


@pytest.mark.parametrize(
    ("to", "http_status", "code"),
    [
        ("15550000005", 400, 131026),
        ("15550000006", 400, 131047),
        ("15550000007", 400, 132001),
        ("15550000008", 400, 132015),
        ("15550000009", 401, 190),
    ],
)
def test_it_refuses_permanent_fault_recipients_every_time(
    sandbox: SandboxClient, receiver: WebhookReceiver, to: str, http_status: int, code: int
) -> None:
    number = sandbox.register(receiver.url)

    answers = [sandbox.send(number, to=to, key="same") for _ in range(2)]

    for answer in answers:
        assert answer.status_code == http_status
        error = answer.json()["error"]
        assert error["code"] == code
        assert error["message"].startswith(f"(#{code}) ")
        assert error["type"] == "OAuthException"
        assert error["error_data"]["messaging_product"] == "whatsapp"
        assert error["error_data"]["details"]
        assert error["fbtrace_id"]
    assert sandbox.messages(number) == []


def test_it_fails_a_message_by_webhook_after_sending_it(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url)

    response = sandbox.send(number, to="15550000010", biz_opaque_callback_data="outbox-10")

    assert response.status_code == 200
    sent, failed = (statuses_in(h.body)[0] for h in receiver.wait_for(2))
    assert (sent["status"], failed["status"]) == ("sent", "failed")
    assert sent["biz_opaque_callback_data"] == "outbox-10"
    [error] = failed["errors"]
    assert error["code"] == 131049
    assert error["title"] and error["message"] and error["error_data"]["details"]
    assert not {"conversation", "pricing"} & failed.keys()


@pytest.mark.parametrize(
    ("to", "order"),
    [
        ("15550000011", ["delivered", "sent", "read"]),
        ("15550000012", ["sent", "read"]),
        ("16505551234", ["sent", "delivered", "read"]),
    ],
    ids=["out-of-order", "read-without-delivered", "ordinary"],
)
def test_it_posts_status_webhooks_in_the_recipients_order(
    sandbox: SandboxClient, receiver: WebhookReceiver, to: str, order: list[str]
) -> None:
    number = sandbox.register(receiver.url)

    sandbox.send(number, to=to)

    hooks = receiver.wait_for(len(order))
    assert [statuses_in(h.body)[0]["status"] for h in hooks] == order
    wait_until(lambda: len(sandbox.webhooks(number)) == len(order), what="the webhook log")
    assert len(receiver.snapshot()) == len(order)


def test_it_hangs_without_accepting_then_answers_503(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url, hang_seconds=0.5)
    started = time.monotonic()

    response = sandbox.send(number, to="15550000013", timeout=5)

    assert time.monotonic() - started >= 0.5
    assert response.status_code == 503
    assert response.json()["error"]["code"] == 131016
    assert sandbox.messages(number) == []
    assert sandbox.webhooks(number) == []
    assert sandbox.requests(number)[0]["fault"] == "hang_then_unavailable"


def test_it_lists_its_fault_recipients(sandbox: SandboxClient) -> None:
    faults = sandbox.http.get("/_sandbox/faults").json()

    assert sorted(faults["recipients"]) == [f"155500000{n:02d}" for n in range(1, 14)]
    assert set(faults["rates"]) == {"timeout", "reset", "hang", "server_error", "rate_limited"}
