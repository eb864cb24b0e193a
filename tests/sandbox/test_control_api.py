"""The control API: numbers, their behaviour, the logs, reset, health, random faults."""

from typing import Any

from .conftest import SandboxClient, WebhookReceiver


def test_it_reports_health(sandbox: SandboxClient) -> None:
    response = sandbox.http.get("/_sandbox/health")

    assert (response.status_code, response.json()) == (200, {"status": "ok"})


def test_it_registers_a_number_with_documented_defaults(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url)

    assert number["honour_idempotency_keys"] is False
    assert number["statuses"] == ["sent", "delivered", "read"]
    assert number["rate_limit_mps"] == 80
    assert number["hang_seconds"] == 30
    assert number["waba_id"].isdigit()
    fetched = sandbox.http.get(f"/_sandbox/numbers/{number['phone_number_id']}").json()
    assert fetched == number
    listed = sandbox.http.get("/_sandbox/numbers").json()["numbers"]
    assert listed == [number]


def test_it_replaces_a_number_registered_twice(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url)

    again = sandbox.http.post("/_sandbox/numbers", json=number | {"token": "rotated"})

    assert again.status_code == 200
    assert again.json()["token"] == "rotated"


def test_it_refuses_an_invalid_number_with_the_fields_at_fault(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    response = sandbox.http.post(
        "/_sandbox/numbers",
        json={"phone_number_id": "1", "token": "t", "webhook_url": "ftp://x", "colour": "red"},
    )

    assert response.status_code == 400
    fields = {d["field"] for d in response.json()["details"]}
    assert fields == {"app_secret", "webhook_url", "colour"}


def test_it_changes_a_numbers_behaviour(sandbox: SandboxClient, receiver: WebhookReceiver) -> None:
    number = sandbox.register(receiver.url)

    changed = sandbox.patch(number["phone_number_id"], token="new-token", statuses=["sent"])

    assert changed["token"] == "new-token"
    assert changed["statuses"] == ["sent"]
    assert sandbox.send(number).status_code == 401
    assert sandbox.send(number | {"token": "new-token"}).status_code == 200


def test_it_refuses_a_bad_change_and_keeps_the_old_settings(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url)
    path = f"/_sandbox/numbers/{number['phone_number_id']}"

    responses = [
        sandbox.http.patch(path, json={"fault_rates": {"timeout": 0.7, "reset": 0.7}}),
        sandbox.http.patch(path, json={"fault_rates": {"meteor": 0.1}}),
        sandbox.http.patch(path, json={"statuses": ["played"]}),
        sandbox.http.patch(path, json={"phone_number_id": "other"}),
        sandbox.http.patch(path, content=b"not json"),
    ]

    assert [r.status_code for r in responses] == [400] * 5
    assert sandbox.http.get(path).json() == number


def test_it_answers_404_for_unknown_numbers_and_endpoints(sandbox: SandboxClient) -> None:
    assert sandbox.http.get("/_sandbox/numbers/nope").status_code == 404
    assert sandbox.http.patch("/_sandbox/numbers/nope", json={}).status_code == 404
    assert sandbox.http.get("/_sandbox/numbers/nope/messages").status_code == 404
    assert sandbox.http.post("/_sandbox/numbers/nope/inbound", json={}).status_code == 404
    assert sandbox.http.get("/_sandbox/nothing").status_code == 404
    assert sandbox.http.delete("/_sandbox/health").status_code == 405


def test_it_refuses_an_inbound_message_without_sender_or_text(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url)
    path = f"/_sandbox/numbers/{number['phone_number_id']}/inbound"

    assert sandbox.http.post(path, json={"text": "hi"}).status_code == 400
    assert sandbox.http.post(path, json={"from": "+1 650", "text": "hi"}).status_code == 400
    assert sandbox.http.post(path, json={"from": "16505551234"}).status_code == 400


def test_it_forgets_everything_on_reset(sandbox: SandboxClient, receiver: WebhookReceiver) -> None:
    number = sandbox.register(receiver.url, statuses=[])
    sandbox.send(number)

    assert sandbox.http.post("/_sandbox/reset").status_code == 200

    assert sandbox.http.get("/_sandbox/numbers").json() == {"numbers": []}
    assert sandbox.http.get("/_sandbox/requests").json() == {"requests": []}
    assert sandbox.http.get("/_sandbox/webhooks").json() == {"webhooks": []}
    assert sandbox.send(number).status_code == 400


def outcomes(sandbox: SandboxClient, number: dict[str, Any], count: int) -> list[int]:
    return [sandbox.send(number, text={"body": f"n{i}"}).status_code for i in range(count)]


def test_it_injects_random_faults_at_the_configured_rate(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url, statuses=[], fault_rates={"server_error": 1.0})

    response = sandbox.send(number)

    assert response.status_code == 500
    assert response.json()["error"]["code"] == 131000
    assert sandbox.requests(number)[0]["fault"] == "server_error"


def test_a_seed_makes_random_faults_repeatable(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    rates = {"server_error": 0.3, "rate_limited": 0.3}
    number = sandbox.register(receiver.url, statuses=[], fault_rates=rates, seed=42)
    first = outcomes(sandbox, number, 30)

    sandbox.http.post("/_sandbox/reset")
    number = sandbox.register(receiver.url, statuses=[], fault_rates=rates, seed=42)
    second = outcomes(sandbox, number, 30)

    assert first == second
    assert set(first) == {200, 429, 500}
