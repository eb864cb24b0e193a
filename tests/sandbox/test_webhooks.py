"""Status and inbound webhooks: signatures, envelope, and the late/duplicated/shuffled modes."""

import json
import time
from collections import Counter

from .conftest import SandboxClient, WebhookReceiver
from .support import TEST_APP_SECRET, is_signed, statuses_in, wait_until


def test_it_signs_each_webhook_over_the_raw_body_with_the_app_secret(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url, app_secret="s3cret-é")

    sandbox.send(number)

    for hook in receiver.wait_for(3):
        assert hook.headers["Content-Type"] == "application/json"
        assert is_signed(hook.body, hook.headers["X-Hub-Signature-256"], "s3cret-é")
        assert not is_signed(hook.body, hook.headers["X-Hub-Signature-256"], TEST_APP_SECRET)


def test_a_signature_breaks_if_the_receiver_reserialises_the_json(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url)

    sandbox.http.post(
        f"/_sandbox/numbers/{number['phone_number_id']}/inbound",
        json={"from": "16505551234", "text": "Café? 😀"},
    )

    [hook] = receiver.wait_for(1)
    assert is_signed(hook.body, hook.headers["X-Hub-Signature-256"])
    reserialised = json.dumps(json.loads(hook.body)).encode()
    assert not is_signed(reserialised, hook.headers["X-Hub-Signature-256"])


def test_it_wraps_statuses_in_metas_envelope(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(
        receiver.url, waba_id="102290129340398", display_phone_number="15550783881"
    )
    wamid = sandbox.send(number, to="+16505551234").json()["messages"][0]["id"]

    hook = receiver.wait_for(1)[0]

    payload = json.loads(hook.body)
    assert payload["object"] == "whatsapp_business_account"
    [entry] = payload["entry"]
    assert entry["id"] == "102290129340398"
    [change] = entry["changes"]
    assert change["field"] == "messages"
    value = change["value"]
    assert value["messaging_product"] == "whatsapp"
    assert value["metadata"] == {
        "display_phone_number": "15550783881",
        "phone_number_id": number["phone_number_id"],
    }
    [status] = value["statuses"]
    assert status["id"] == wamid
    assert status["status"] == "sent"
    assert status["recipient_id"] == "16505551234"
    assert status["timestamp"].isdigit()
    assert abs(int(status["timestamp"]) - time.time()) < 60


def test_it_echoes_biz_opaque_callback_data_only_when_the_send_carried_it(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url)

    with_data = sandbox.send(number, biz_opaque_callback_data="outbox-42").json()
    without = sandbox.send(number).json()

    statuses = [s for h in receiver.wait_for(6) for s in statuses_in(h.body)]
    by_wamid = {m["messages"][0]["id"]: m for m in (with_data, without)}
    for status in statuses:
        carried = status["id"] == with_data["messages"][0]["id"]
        assert status["id"] in by_wamid
        assert ("biz_opaque_callback_data" in status) == carried
        if carried:
            assert status["biz_opaque_callback_data"] == "outbox-42"


def test_it_adds_conversation_and_pricing_to_sent_and_delivered_only(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url)

    sandbox.send(number)

    sent, delivered, read = (statuses_in(h.body)[0] for h in receiver.wait_for(3))
    assert "expiration_timestamp" in sent["conversation"]
    assert "expiration_timestamp" not in delivered["conversation"]
    assert sent["pricing"]["category"] == sent["conversation"]["origin"]["type"] == "service"
    assert sent["pricing"]["billable"] is False
    assert not {"conversation", "pricing"} & read.keys()


def test_it_delays_each_webhook(sandbox: SandboxClient, receiver: WebhookReceiver) -> None:
    number = sandbox.register(receiver.url, webhook_delay_ms=300)
    started = time.monotonic()

    sandbox.send(number)
    answered = time.monotonic()

    hooks = receiver.wait_for(3)
    assert answered < hooks[0].at  # the send never waits for its webhooks
    assert hooks[0].at - started >= 0.3
    assert hooks[2].at - started >= 0.9
    # Timestamps keep the real order of events even when posts come late.
    stamps = [int(statuses_in(h.body)[0]["timestamp"]) for h in hooks]
    assert stamps == sorted(stamps)


def test_it_duplicates_each_webhook(sandbox: SandboxClient, receiver: WebhookReceiver) -> None:
    number = sandbox.register(receiver.url, duplicate_webhooks=True)

    sandbox.send(number)

    hooks = receiver.wait_for(6)
    statuses = [statuses_in(h.body)[0]["status"] for h in hooks]
    assert Counter(statuses) == {"sent": 2, "delivered": 2, "read": 2}


def test_it_shuffles_webhooks_reproducibly_with_a_seed(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url, shuffle_webhooks=True, seed=7)

    wamids = [sandbox.send(number).json()["messages"][0]["id"] for _ in range(5)]

    hooks = receiver.wait_for(15)
    orders = {
        wamid: [s["status"] for h in hooks for s in statuses_in(h.body) if s["id"] == wamid]
        for wamid in wamids
    }
    assert all(sorted(order) == ["delivered", "read", "sent"] for order in orders.values())
    assert any(order != ["sent", "delivered", "read"] for order in orders.values())


def test_it_batches_a_messages_statuses_into_one_post(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url, batch_webhooks=True, duplicate_webhooks=True)

    sandbox.send(number)

    [hook] = receiver.wait_for(1)
    assert is_signed(hook.body, hook.headers["X-Hub-Signature-256"])
    statuses = [s["status"] for s in statuses_in(hook.body)]
    assert Counter(statuses) == {"sent": 2, "delivered": 2, "read": 2}
    wait_until(lambda: sandbox.webhooks(number), what="the webhook log")
    assert len(receiver.snapshot()) == 1


def test_it_retries_a_webhook_the_receiver_refused(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    receiver.failures = [500, 503]
    number = sandbox.register(receiver.url, statuses=["sent"])

    sandbox.send(number)

    hooks = receiver.wait_for(3)
    assert hooks[0].body == hooks[1].body == hooks[2].body
    [logged] = wait_until(lambda: sandbox.webhooks(number), what="the webhook log")
    assert (logged["result"], logged["attempts"], logged["http_status"]) == ("delivered", 3, 200)


def test_it_drops_a_webhook_after_a_few_failed_attempts_and_carries_on(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    receiver.failures = [500] * 4
    number = sandbox.register(receiver.url, statuses=["sent", "delivered"])

    sandbox.send(number)

    log = wait_until(lambda: len(sandbox.webhooks(number)) == 2 and sandbox.webhooks(number))
    assert [(w["result"], w["attempts"]) for w in log] == [("dropped", 4), ("delivered", 1)]
    assert statuses_in(receiver.snapshot()[-1].body)[0]["status"] == "delivered"


def test_it_posts_a_signed_inbound_message(
    sandbox: SandboxClient, receiver: WebhookReceiver
) -> None:
    number = sandbox.register(receiver.url)

    answer = sandbox.http.post(
        f"/_sandbox/numbers/{number['phone_number_id']}/inbound",
        json={"from": "16505551234", "text": "Can I change my delivery slot?", "name": "Kerry"},
    )

    assert answer.status_code == 202
    [hook] = receiver.wait_for(1)
    assert is_signed(hook.body, hook.headers["X-Hub-Signature-256"])
    value = json.loads(hook.body)["entry"][0]["changes"][0]["value"]
    assert value["contacts"] == [{"profile": {"name": "Kerry"}, "wa_id": "16505551234"}]
    [message] = value["messages"]
    assert message["id"] == answer.json()["id"]
    assert message["from"] == "16505551234"
    assert message["type"] == "text"
    assert message["text"] == {"body": "Can I change my delivery slot?"}
    assert message["timestamp"].isdigit()
    assert "statuses" not in value
