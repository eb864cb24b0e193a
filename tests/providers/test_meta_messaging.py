"""Messenger / Instagram: the send body, the answers' classes, the webhook's parse.

From the documented shapes in tests/fixtures/messenger/ (sources in its README)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.providers import get_provider
from app.providers.base import FailureClass, OutboundMessage, WebhookFormatError
from app.providers.classification import classify, describe
from app.providers.dead_letter_order import rank_of
from app.providers.http import HttpAnswer
from app.providers.meta_messaging import MetaMessagingProvider, build_body
from app.repo.deadletters import advice

FIXTURES = Path(__file__).parents[1] / "fixtures" / "messenger"
MESSENGER = get_provider("messenger")
INSTAGRAM = get_provider("instagram")
assert isinstance(MESSENGER, MetaMessagingProvider)
assert isinstance(INSTAGRAM, MetaMessagingProvider)


def text(name: str) -> str:
    return (FIXTURES / f"{name}.json").read_text()


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(text(name))
    return data


def outbound(**kwargs: Any) -> OutboundMessage:
    values: dict[str, Any] = {
        "recipient": "1254477777772919",
        "body_text": "hello",
        "provider_key": "k",
        "correlation_id": "ratchet:1:1:abc",
    }
    return OutboundMessage(**(values | kwargs))


def test_a_text_is_a_response_carrying_our_correlation_id_as_metadata() -> None:
    assert build_body(outbound()) == {
        "recipient": {"id": "1254477777772919"},
        "messaging_type": "RESPONSE",
        "message": {"text": "hello", "metadata": "ratchet:1:1:abc"},
    }


def test_the_human_agent_tag_sends_message_tag() -> None:
    body = build_body(outbound(tag="HUMAN_AGENT"))
    assert (body["messaging_type"], body["tag"]) == ("MESSAGE_TAG", "HUMAN_AGENT")


def test_a_template_or_an_unknown_tag_is_refused_before_any_call() -> None:
    with pytest.raises(ValueError, match="text only"):
        build_body(outbound(body_text=None, template={"name": "x", "language": "en"}))
    with pytest.raises(ValueError, match="tag"):
        build_body(outbound(tag="PROMOTION"))


def answer(status: int, name: str) -> HttpAnswer:
    return HttpAnswer(status=status, headers={}, text=text(name))


def test_the_documented_success_answer_gives_the_message_id() -> None:
    result = MESSENGER._read_answer(answer(200, "send_success"))
    assert result.accepted and result.provider_message_id == fixture("send_success")["message_id"]


@pytest.mark.parametrize(
    ("status", "name", "expected"),
    [
        (400, "send_error_outside_window", FailureClass.PERMANENT),  # 10 + 2018278
        (403, "send_error_permission", FailureClass.SENDER_BROKEN),  # 10 alone
        (401, "send_error_token", FailureClass.SENDER_BROKEN),  # 190
    ],
)
def test_errors_are_classified_by_code_and_subcode_and_kept_verbatim(
    status: int, name: str, expected: FailureClass
) -> None:
    for provider in (MESSENGER, INSTAGRAM):
        result = provider._read_answer(answer(status, name))
        assert result.failure is expected and result.outcome_known
        assert result.error is not None
        assert result.error.raw == text(name) and result.error.http_status == status
        documented = fixture(name)["error"]
        assert (result.error.code, result.error.subcode) == (
            documented["code"],
            documented.get("error_subcode"),
        )
        assert result.error.trace_id == documented["fbtrace_id"]


def test_code_10_is_sender_broken_unless_its_subcode_says_outside_the_window() -> None:
    assert classify("messenger", 400, 10) is FailureClass.SENDER_BROKEN
    assert classify("messenger", 400, 10, 2018278) is FailureClass.PERMANENT
    assert classify("messenger", 400, 10, 1234) is FailureClass.SENDER_BROKEN
    assert classify("instagram", 400, 10, 2018278) is FailureClass.PERMANENT
    # Only Meta's messaging APIs read that subcode.
    assert classify("whatsapp", 400, 10, 2018278) is FailureClass.SENDER_BROKEN
    outside = describe("messenger", 10, 2018278)
    assert outside is not None and "window" in outside.meaning
    # A window-closed failure is among the dead letters a person looks at first.
    assert rank_of("messenger", "permanent", 10) < rank_of("messenger", "permanent", 551)


def test_a_2xx_without_a_message_id_is_an_unknown_outcome() -> None:
    result = MESSENGER._read_answer(HttpAnswer(status=200, headers={}, text="{}"))
    assert result.failure is FailureClass.UNKNOWN and not result.outcome_known


def test_deliveries_with_mids_are_statuses_and_without_them_a_watermark() -> None:
    with_mids = MESSENGER.parse_webhook(fixture("delivery_with_mids"))
    assert [(s.provider_message_id, s.status) for s in with_mids.statuses] == [
        ("mid.1458668856218:ed81099e15d3f4f233", "delivered")
    ]
    assert with_mids.watermarks == []
    only = MESSENGER.parse_webhook(fixture("delivery_watermark_only"))
    assert only.statuses == []
    [mark] = only.watermarks
    assert (mark.routing_id, mark.recipient, mark.status, mark.watermark_ms) == (
        "1067280970047460",
        "1254477777772919",
        "delivered",
        1458668856253,
    )


def test_a_read_is_a_watermark_and_instagrams_seen_names_its_mid() -> None:
    [mark] = MESSENGER.parse_webhook(fixture("read")).watermarks
    assert (mark.status, mark.watermark_ms) == ("read", 1458668856253)
    seen = INSTAGRAM.parse_webhook(fixture("instagram_seen"))
    assert [(s.routing_id, s.status) for s in seen.statuses] == [("17841400000000001", "read")]


def test_inbound_opens_windows_and_echoes_are_sent_statuses_with_their_metadata() -> None:
    [inbound] = MESSENGER.parse_webhook(fixture("inbound_text")).inbound
    assert (inbound.sender, inbound.provider_message_id) == (
        "1254477777772919",
        "m_1457764197618:41d102a3e1ae206a38",
    )
    echo = MESSENGER.parse_webhook(fixture("echo"))
    assert echo.inbound == []
    [status] = echo.statuses
    assert (status.status, status.recipient, status.correlation_id) == (
        "sent",
        "1254477777772919",
        "<DEVELOPER_DEFINED_METADATA_STRING>",
    )


def test_every_entry_names_its_routing_id_and_the_envelope_must_be_the_providers() -> None:
    body = fixture("delivery_with_mids")
    second = json.loads(json.dumps(body["entry"][0]))
    second["id"] = "2222"
    body["entry"].append(second)
    assert MESSENGER.routing_ids(body) == ["1067280970047460", "2222"]
    assert len(MESSENGER.parse_webhook(body).statuses) == 2
    with pytest.raises(WebhookFormatError):
        INSTAGRAM.routing_ids(body)  # a `page` envelope is not Instagram's


@pytest.mark.parametrize(
    "breakage",
    [
        lambda e: e.pop("id"),
        lambda e: e["messaging"][0]["delivery"].pop("watermark"),
        lambda e: e["messaging"][0]["delivery"].update(watermark="soon"),
        lambda e: e["messaging"][0].pop("sender"),
        lambda e: e.update(messaging={"not": "a list"}),
    ],
)
def test_a_malformed_delivery_is_a_format_error(breakage: Any) -> None:
    body = fixture("delivery_watermark_only")
    breakage(body["entry"][0])
    with pytest.raises(WebhookFormatError):
        MESSENGER.routing_ids(body)
        MESSENGER.parse_webhook(body)


def test_the_signature_is_meta_sha256_over_the_raw_bytes() -> None:
    import hashlib
    import hmac

    raw = text("read").encode()
    good = "sha256=" + hmac.new(b"s3cret", raw, hashlib.sha256).hexdigest()
    assert MESSENGER.verify_signature(raw, {"X-Hub-Signature-256": good}, "s3cret")
    assert not MESSENGER.verify_signature(raw + b" ", {"X-Hub-Signature-256": good}, "s3cret")
    assert not MESSENGER.verify_signature(raw, {"X-Hub-Signature-256": good}, "other")
    assert not MESSENGER.verify_signature(raw, {}, "s3cret")
    assert not MESSENGER.verify_signature(raw, {"X-Hub-Signature-256": good}, "")


def test_a_window_closed_dead_letter_is_explained_as_such_not_as_a_permission_problem() -> None:
    meaning, action = advice("messenger", "permanent", 10, 2018278)
    assert "window" in meaning and "HUMAN_AGENT" in action
    permission, _ = advice("messenger", "sender_broken", 10)
    assert "permission" in permission
