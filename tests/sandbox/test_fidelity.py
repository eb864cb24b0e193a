"""The sandbox's bodies have the shape Meta documents, checked against hand-made fixtures.

tests/fixtures/whatsapp/ was transcribed from the provider notes, not from the sandbox, so a
sandbox that drifted toward whatever Ratchet happens to accept fails here.
"""

import json
from pathlib import Path
from typing import Any

import pytest

from .conftest import SandboxClient, WebhookReceiver
from .support import statuses_in

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "whatsapp"
JSON_TYPES = {
    dict: "object",
    list: "array",
    str: "string",
    bool: "boolean",
    int: "number",
    float: "number",
    type(None): "null",
}


def load(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def shape(value: Any, path: str = "$") -> dict[str, str]:
    """Every key path with its JSON type; list items merge under "[]"."""
    paths = {path: JSON_TYPES[type(value)]}
    if isinstance(value, dict):
        for key, item in value.items():
            paths |= shape(item, f"{path}.{key}")
    elif isinstance(value, list):
        for item in value:
            paths |= shape(item, f"{path}[]")
    return paths


def assert_same_shape(actual: Any, expected: Any) -> None:
    actual_shape, expected_shape = shape(actual), shape(expected)
    missing = expected_shape.keys() - actual_shape.keys()
    extra = actual_shape.keys() - expected_shape.keys()
    assert not missing, f"the sandbox lacks {sorted(missing)}"
    assert not extra, f"the sandbox adds {sorted(extra)}"
    for path, json_type in expected_shape.items():
        assert actual_shape[path] == json_type, f"{path}: {actual_shape[path]} != {json_type}"


def assert_same_webhook_constants(actual: dict[str, Any], expected: dict[str, Any]) -> None:
    assert actual["object"] == expected["object"] == "whatsapp_business_account"
    for payload in (actual, expected):
        [entry] = payload["entry"]
        [change] = entry["changes"]
        assert change["field"] == "messages"
        assert change["value"]["messaging_product"] == "whatsapp"


TEMPLATE = {
    "messaging_product": "whatsapp",
    "recipient_type": "individual",
    "type": "template",
    "template": {"name": "order_shipped", "language": {"code": "en_US"}},
    "biz_opaque_callback_data": "ratchet:msg_01J0Y7Q5ZK",
}


def test_the_success_answer_matches_the_documented_shape(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url, statuses=[])
    expected = load("send_success.json")

    actual = sandbox.send(number, body=TEMPLATE | {"to": "+16505551234"}).json()

    assert_same_shape(actual, expected)
    assert actual["messaging_product"] == expected["messaging_product"]


def test_the_error_answer_matches_the_documented_shape(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url)
    expected = load("send_error.json")

    response = sandbox.send(number, to="15550000006")

    assert response.status_code == 400
    actual = response.json()
    assert_same_shape(actual, expected)
    for field in ("message", "type", "code"):
        assert actual["error"][field] == expected["error"][field]
    assert actual["error"]["error_data"]["messaging_product"] == "whatsapp"


@pytest.mark.parametrize("status", ["sent", "delivered", "read"])
def test_each_status_webhook_matches_the_documented_shape(
    sandbox: SandboxClient, receiver: WebhookReceiver, status: str
) -> None:
    number = sandbox.register(receiver.url)
    expected = load(f"status_{status}.json")

    sandbox.send(number, body=TEMPLATE | {"to": "16505551234"})

    hooks = receiver.wait_for(3)
    [actual] = [json.loads(h.body) for h in hooks if statuses_in(h.body)[0]["status"] == status]
    assert_same_shape(actual, expected)
    assert_same_webhook_constants(actual, expected)
    actual_status = statuses_in(json.dumps(actual).encode())[0]
    expected_status = statuses_in(json.dumps(expected).encode())[0]
    for field in ("status", "recipient_id", "biz_opaque_callback_data"):
        assert actual_status[field] == expected_status[field]
    if "pricing" in expected_status:
        assert actual_status["pricing"] == expected_status["pricing"]


def test_the_failed_status_webhook_matches_the_documented_shape(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url)
    expected = load("status_failed.json")

    sandbox.send(number, to="15550000010")

    actual = json.loads(receiver.wait_for(2)[1].body)
    assert_same_shape(actual, expected)
    assert_same_webhook_constants(actual, expected)
    assert statuses_in(json.dumps(actual).encode())[0]["status"] == "failed"


def test_the_inbound_message_webhook_matches_the_documented_shape(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url)
    expected = load("inbound_text.json")

    sandbox.http.post(
        f"/_sandbox/numbers/{number['phone_number_id']}/inbound",
        json={
            "from": "16505551234",
            "text": "Yes, Tuesday at 10 works for me.",
            "name": "Kerry Fisher",
        },
    )

    actual = json.loads(receiver.wait_for(1)[0].body)
    assert_same_shape(actual, expected)
    assert_same_webhook_constants(actual, expected)
    actual_value = actual["entry"][0]["changes"][0]["value"]
    expected_value = expected["entry"][0]["changes"][0]["value"]
    assert actual_value["contacts"] == expected_value["contacts"]
    assert actual_value["messages"][0]["text"] == expected_value["messages"][0]["text"]
    assert actual_value["messages"][0]["type"] == "text"
