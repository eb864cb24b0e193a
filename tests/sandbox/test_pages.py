"""The sandbox's Messenger / Instagram Send API and receipts, held to Meta's documentation
(the shapes in tests/fixtures/messenger/), over HTTP against the sandbox process."""

import json
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import SandboxClient, WebhookReceiver
from .support import TEST_APP_SECRET, is_signed, wait_until

FIXTURES = Path(__file__).parents[1] / "fixtures" / "messenger"
PSID = "1254477777772919"


def register(sandbox: SandboxClient, receiver: WebhookReceiver, **settings: Any) -> dict[str, Any]:
    body = {
        "page_id": f"10672{uuid.uuid4().int % 10**11:011d}",
        "token": "EAAPage-token",
        "app_secret": TEST_APP_SECRET,
        "webhook_url": receiver.url.replace("whatsapp", "messenger"),
    } | settings
    response = sandbox.http.post("/_sandbox/pages", json=body)
    assert response.status_code == 201, response.text
    page: dict[str, Any] = response.json()
    return page


def send(
    sandbox: SandboxClient,
    page: dict[str, Any],
    to: str = PSID,
    *,
    token: str | None = None,
    **body: Any,
) -> httpx.Response:
    payload = {
        "recipient": {"id": to},
        "messaging_type": "RESPONSE",
        "message": {"text": "Your order has shipped."},
    } | body
    return sandbox.http.post(
        f"/v21.0/{page['page_id']}/messages",
        json=payload,
        headers={"Authorization": f"Bearer {token or page['token']}"},
    )


def write_in(
    sandbox: SandboxClient,
    page: dict[str, Any],
    customer: str = PSID,
    receiver: WebhookReceiver | None = None,
) -> None:
    """The customer writes; with `receiver`, wait for the inbound webhook to land (posts of
    different deliveries race each other)."""
    before = len(receiver.snapshot()) if receiver else 0
    response = sandbox.http.post(
        f"/_sandbox/pages/{page['page_id']}/inbound", json={"from": customer, "text": "hi"}
    )
    assert response.status_code == 202, response.text
    if receiver is not None:
        receiver.wait_for(before + 1)


def events(receiver: WebhookReceiver, count: int) -> list[dict[str, Any]]:
    hooks = receiver.wait_for(count)
    assert all(is_signed(h.body, h.headers.get("X-Hub-Signature-256")) for h in hooks)
    return [
        event
        for h in hooks
        for entry in json.loads(h.body)["entry"]
        for event in entry["messaging"]
    ]


def test_a_send_answers_the_documented_success_shape_and_posts_delivery_then_read(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    page = register(sandbox, receiver)
    write_in(sandbox, page, receiver=receiver)
    response = send(sandbox, page, message={"text": "Shipped.", "metadata": "ours-1"})
    assert response.status_code == 200, response.text
    documented = json.loads((FIXTURES / "send_success.json").read_text())
    assert set(response.json()) == set(documented)
    mid = response.json()["message_id"]
    assert response.json()["recipient_id"] == PSID
    seen = events(receiver, 4)  # the inbound, the echo, then the two receipts
    assert seen[0]["message"]["text"] == "hi"
    echo, delivery, read = seen[1], seen[2], seen[3]
    documented_echo = json.loads((FIXTURES / "echo.json").read_text())
    assert set(echo["message"]) == set(documented_echo["entry"][0]["messaging"][0]["message"])
    assert echo["message"]["is_echo"] is True and echo["message"]["mid"] == mid
    assert echo["message"]["metadata"] == "ours-1"
    assert (echo["sender"]["id"], echo["recipient"]["id"]) == (page["page_id"], PSID)
    assert delivery["delivery"]["mids"] == [mid]
    assert set(delivery) == set(
        json.loads((FIXTURES / "delivery_with_mids.json").read_text())["entry"][0]["messaging"][0]
    )
    assert read["read"]["watermark"] >= delivery["delivery"]["watermark"]
    assert {read["sender"]["id"], read["recipient"]["id"]} == {PSID, page["page_id"]}
    body = json.loads(receiver.snapshot()[1].body)
    assert body["object"] == "page" and body["entry"][0]["id"] == page["page_id"]


def test_outside_the_window_a_response_fails_with_code_10_subcode_2018278(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    page = register(sandbox, receiver)
    response = send(sandbox, page)  # the customer never wrote
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["error_subcode"]) == (10, 2018278)
    assert set(error) == set(
        json.loads((FIXTURES / "send_error_outside_window.json").read_text())["error"]
    )


def test_human_agent_reaches_past_24_hours_and_up_to_7_days(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    page = register(sandbox, receiver)
    write_in(sandbox, page, receiver=receiver)
    day = 24 * 60 * 60 * 1000
    sandbox.http.patch(f"/_sandbox/pages/{page['page_id']}", json={"clock_offset_ms": 2 * day})
    assert send(sandbox, page).json()["error"]["error_subcode"] == 2018278
    tagged = send(sandbox, page, messaging_type="MESSAGE_TAG", tag="HUMAN_AGENT")
    assert tagged.status_code == 200, tagged.text
    sandbox.http.patch(f"/_sandbox/pages/{page['page_id']}", json={"clock_offset_ms": 8 * day})
    late = send(sandbox, page, messaging_type="MESSAGE_TAG", tag="HUMAN_AGENT")
    assert late.json()["error"]["error_subcode"] == 2018278


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"messaging_type": "MESSAGE_TAG"}, 100),  # a tag type without a tag
        ({"message": {"text": ""}}, 100),
        ({"message": {"text": "x" * 2001}}, 100),
        ({"recipient": {}}, 100),
        ({"messaging_type": "PROMO"}, 100),
    ],
)
def test_malformed_sends_are_refused_with_graph_errors(
    sandbox: SandboxClient, receiver: WebhookReceiver, change: dict[str, Any], code: int
) -> None:
    page = register(sandbox, receiver)
    write_in(sandbox, page, receiver=receiver)
    response = send(sandbox, page, **change)
    assert response.status_code == 400 and response.json()["error"]["code"] == code
    assert sandbox.http.get(f"/_sandbox/pages/{page['page_id']}/messages").json() == {
        "messages": []
    }


def test_a_wrong_token_is_190_and_nothing_is_recorded(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    page = register(sandbox, receiver)
    write_in(sandbox, page, receiver=receiver)
    response = send(sandbox, page, token="not-the-token")
    assert (response.status_code, response.json()["error"]["code"]) == (401, 190)
    assert sandbox.http.get(f"/_sandbox/pages/{page['page_id']}/messages").json()["messages"] == []


def test_watermark_only_deliveries_and_duplicated_shuffled_receipts_on_request(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    page = register(
        sandbox,
        receiver,
        echoes=False,
        delivery_mids=False,
        duplicate_webhooks=True,
        shuffle_webhooks=True,
        seed=7,
    )
    write_in(sandbox, page, receiver=receiver)
    assert send(sandbox, page).status_code == 200
    seen = events(receiver, 5)[1:]
    kinds = sorted("delivery" if "delivery" in e else "read" for e in seen)
    assert kinds == ["delivery", "delivery", "read", "read"]
    assert all("mids" not in e["delivery"] for e in seen if "delivery" in e)


def test_instagram_sends_post_messaging_seen_by_mid_and_no_delivery(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    page = register(sandbox, receiver, platform="instagram", echoes=False)
    write_in(sandbox, page, "6230000000000001", receiver)
    response = send(sandbox, page, "6230000000000001")
    assert response.status_code == 200, response.text
    seen = events(receiver, 2)
    assert json.loads(receiver.snapshot()[1].body)["object"] == "instagram"
    assert seen[1]["read"] == {"mid": response.json()["message_id"]}


def test_the_control_api_registers_lists_and_makes_a_customer_read(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    page = register(sandbox, receiver, receipts=[], echoes=False)
    listed = sandbox.http.get("/_sandbox/pages").json()["pages"]
    assert [p["page_id"] for p in listed] == [page["page_id"]]
    write_in(sandbox, page, receiver=receiver)
    mid = send(sandbox, page).json()["message_id"]
    accepted = sandbox.http.get(f"/_sandbox/pages/{page['page_id']}/messages").json()["messages"]
    assert [m["mid"] for m in accepted] == [mid]
    assert (
        sandbox.http.post(
            f"/_sandbox/pages/{page['page_id']}/read", json={"from": PSID}
        ).status_code
        == 202
    )
    read = events(receiver, 2)[1]
    assert read["read"]["watermark"] >= accepted[0]["time_ms"]
    bad = sandbox.http.post(f"/_sandbox/pages/{page['page_id']}/inbound", json={"from": "a b"})
    assert bad.status_code == 400
    unknown = sandbox.http.post("/_sandbox/pages", json={"page_id": "x"})
    assert unknown.status_code == 400
    faults = sandbox.http.get("/_sandbox/page-faults").json()["recipients"]
    assert faults["7770000000000006"]["subcode"] == 2018278


def test_a_whatsapp_number_and_a_page_share_the_send_path_without_mixing(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url)
    page = register(sandbox, receiver)
    assert sandbox.send(number).status_code == 200  # the Cloud API's shape, to a number
    write_in(sandbox, page, receiver=receiver)
    assert send(sandbox, page).status_code == 200  # the Send API's, to a Page
    wrong = sandbox.http.post(
        f"/v21.0/{page['page_id']}/messages",
        json={"messaging_product": "whatsapp", "to": "16505551234", "type": "text"},
        headers={"Authorization": f"Bearer {page['token']}"},
    )
    assert wrong.status_code == 400
    wait_until(lambda: len(receiver.snapshot()) >= 4)
