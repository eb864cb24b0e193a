"""The Cloud API send endpoint: ``POST /{version}/{phone-number-id}/messages``.

``handle_send`` decides everything under the state lock and returns a ``Reply``; the HTTP
layer then answers, hangs or resets as the reply says, and the caller schedules webhooks.
Checks run in the order a client meets them: the object, the token, throughput, the body,
idempotency, then faults.
"""

import base64
import hmac
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from app.sandbox.errors import ERRORS, error_body
from app.sandbox.faults import Answer, Fault, draw_rate_fault, fault_for_recipient
from app.sandbox.faults import recipient_digits as digits_of
from app.sandbox.poster import Delivery
from app.sandbox.state import Number, SandboxState
from app.sandbox.webhooks import AcceptedSend, encode, envelope, status_object, statuses_value

MAX_TEXT_BODY = 4096
MAX_CALLBACK_DATA = 512


@dataclass
class Reply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    answer: Answer = "now"
    hang_seconds: float = 0.0
    webhooks: Delivery | None = None
    webhook_delay: float = 0.0
    delay: float = 0.0  # before any answer (the number's answer_delay_ms)


class InvalidSendError(Exception):
    def __init__(self, code: int, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


def handle_send(
    state: SandboxState, phone_number_id: str, headers: dict[str, str], raw: bytes
) -> Reply:
    now = time.time()
    lower = {name.lower(): value for name, value in headers.items()}
    key = lower.get("idempotency-key")
    entry: dict[str, Any] = {
        "time": now,
        "phone_number_id": phone_number_id,
        "headers": headers,
        "body": _loggable(raw),
        "idempotency_key": key,
        "fault": None,
        "wamid": None,
    }
    with state.lock:
        number = state.numbers.get(phone_number_id)
        reply = _decide(number, phone_number_id, lower, raw, now, entry)
        if number is not None:
            reply.delay = number.settings.answer_delay_ms / 1000
        entry["outcome"] = entry.get("outcome", "rejected")
        entry["http_status"] = None if reply.answer == "reset" else reply.status
        entry["error_code"] = reply.body.get("error", {}).get("code")
        entry["answer"] = reply.answer
        state.log_request(entry)
    return reply


def _decide(
    number: Number | None,
    phone_number_id: str,
    headers: dict[str, str],
    raw: bytes,
    now: float,
    entry: dict[str, Any],
) -> Reply:
    if number is None:
        return _error(
            100,
            f"Unsupported post request. Object with ID '{phone_number_id}' "
            "does not exist, cannot be loaded due to missing permissions, "
            "or does not support this operation.",
        )
    settings = number.settings
    if not _is_authorised(headers.get("authorization", ""), settings.token):
        return _error(190, "Error validating access token: the token is invalid.")
    if number.is_rate_limited(now):
        return _error(
            130429,
            "Message failed to send because there were too many messages "
            f"sent from this phone number ({settings.rate_limit_mps} per second).",
        )
    try:
        payload = validate(raw)
    except InvalidSendError as exc:
        return _error(exc.code, exc.details)
    to = payload["to"]
    entry["to"] = to
    key = entry["idempotency_key"]

    # A repeated key replays the original answer: no new message, no new webhooks, no fault.
    if settings.honour_idempotency_keys and key and key in number.answers_by_key:
        answer = number.answers_by_key[key]
        entry["outcome"] = "replayed"
        entry["wamid"] = answer["messages"][0]["id"]
        return Reply(200, answer)

    pair_limit = settings.pair_limit_seconds
    last_to = number.last_accepted_to.get(digits_of(to))
    if pair_limit is not None and last_to is not None and now - last_to < pair_limit:
        return _error(131056, ERRORS[131056].details)

    fault = fault_for_recipient(to) or draw_rate_fault(settings.fault_rates, number.rng)
    entry["fault"] = fault.name if fault else None
    if fault and fault.times is not None:
        # "Per message": the Idempotency-Key when there is one, else the exact body.
        message_key = f"key:{key}" if key else "body:" + raw.decode("utf-8", "replace")
        served = number.fault_counts.get(message_key, 0)
        if served >= fault.times:
            fault = None
        else:
            number.fault_counts[message_key] = served + 1
    if fault and not fault.accepts:
        return _fault_error(fault, settings.hang_seconds)

    wa_id = digits_of(to)
    wamid = new_wamid(wa_id)
    answer = {
        "messaging_product": "whatsapp",
        "contacts": [{"input": to, "wa_id": wa_id}],
        "messages": [{"id": wamid}],
    }
    number.messages.append(
        {
            "wamid": wamid,
            "to": to,
            "wa_id": wa_id,
            "time": now,
            "idempotency_key": key,
            "headers": entry["headers"],
            "body": payload,
        }
    )
    if settings.honour_idempotency_keys and key:
        number.answers_by_key[key] = answer
    entry["outcome"] = "accepted"
    entry["wamid"] = wamid
    number.last_accepted_to[wa_id] = now
    send = AcceptedSend(
        wamid=wamid,
        wa_id=wa_id,
        accepted_at=now,
        category="utility" if payload["type"] == "template" else "service",
        callback_data=payload.get("biz_opaque_callback_data"),
    )
    return Reply(
        200,
        answer,
        answer=fault.answer if fault else "now",
        hang_seconds=settings.hang_seconds,
        webhooks=plan_status_webhooks(number, send, fault),
        webhook_delay=settings.webhook_delay_ms / 1000,
    )


def plan_status_webhooks(number: Number, send: AcceptedSend, fault: Fault | None) -> Delivery:
    """The POST bodies for one message's statuses, duplicated, shuffled, batched as asked."""
    settings = number.settings
    sequence = fault.statuses if fault and fault.statuses else settings.statuses
    failure_code = fault.failure_code if fault else None
    objects = [status_object(settings, send, status, failure_code) for status in sequence]
    if settings.duplicate_webhooks:
        objects = [obj for obj in objects for _ in range(2)]
    if settings.shuffle_webhooks:
        number.rng.shuffle(objects)
    groups = [objects] if settings.batch_webhooks else [[obj] for obj in objects]
    return Delivery(
        phone_number_id=settings.phone_number_id,
        url=settings.webhook_url,
        app_secret=settings.app_secret,
        kind="statuses",
        bodies=[encode(envelope(settings, statuses_value(group))) for group in groups],
        interval=settings.webhook_delay_ms / 1000,
    )


def validate(raw: bytes) -> dict[str, Any]:
    """The send body as the docs describe it, or InvalidSendError with Meta's code."""
    try:
        payload = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise InvalidSendError(100, "The request body is not valid JSON.") from None
    if not isinstance(payload, dict):
        raise InvalidSendError(100, "The request body must be a JSON object.")
    for name in ("messaging_product", "to", "type"):
        if name not in payload:
            raise InvalidSendError(131008, f"The parameter {name} is required.")
    if payload["messaging_product"] != "whatsapp":
        raise InvalidSendError(100, "messaging_product must be 'whatsapp'.")
    to = payload["to"]
    if not isinstance(to, str) or not 1 <= len(digits_of(to)) <= 20:
        raise InvalidSendError(100, "to must be a phone number or WhatsApp id, as a string.")
    if payload.get("recipient_type", "individual") not in ("individual", "group"):
        raise InvalidSendError(100, "recipient_type must be 'individual' or 'group'.")
    callback_data = payload.get("biz_opaque_callback_data")
    if callback_data is not None and (
        not isinstance(callback_data, str) or len(callback_data) > MAX_CALLBACK_DATA
    ):
        raise InvalidSendError(
            100, f"biz_opaque_callback_data must be a string of at most {MAX_CALLBACK_DATA}."
        )
    kind = payload["type"]
    if kind == "text":
        _validate_text(payload)
    elif kind == "template":
        _validate_template(payload)
    else:
        raise InvalidSendError(100, "type must be 'text' or 'template' in this sandbox.")
    return payload


def _validate_text(payload: dict[str, Any]) -> None:
    text = payload.get("text")
    if not isinstance(text, dict) or "body" not in text:
        raise InvalidSendError(131008, "The parameter text['body'] is required.")
    body = text["body"]
    if not isinstance(body, str) or not body or len(body) > MAX_TEXT_BODY:
        raise InvalidSendError(
            100, f"text['body'] must be a non-empty string of at most {MAX_TEXT_BODY}."
        )


def _validate_template(payload: dict[str, Any]) -> None:
    template = payload.get("template")
    if not isinstance(template, dict) or "name" not in template:
        raise InvalidSendError(131008, "The parameter template['name'] is required.")
    language = template.get("language")
    if not isinstance(language, dict) or "code" not in language:
        raise InvalidSendError(131008, "The parameter template['language']['code'] is required.")
    if not isinstance(template["name"], str) or not template["name"]:
        raise InvalidSendError(100, "template['name'] must be a non-empty string.")
    if not isinstance(language["code"], str) or not language["code"]:
        raise InvalidSendError(100, "template['language']['code'] must be a non-empty string.")


def new_wamid(wa_id: str) -> str:
    # Shaped like real wamids (base64 of a small binary record holding the recipient), so
    # clients meet '+', '/' and '=' in ids as they will in production.
    record = (
        b"\x1c\x18"
        + bytes([len(wa_id) & 0xFF])
        + wa_id.encode()
        + b"\x15\x02\x00\x11\x18\x12"
        + secrets.token_hex(16).upper().encode()
        + b"\x00"
    )
    return "wamid." + base64.b64encode(record).decode()


def _is_authorised(authorization: str, token: str) -> bool:
    scheme, _, presented = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        presented.strip().encode(), token.encode()
    )


def _error(code: int, details: str, headers: dict[str, str] | None = None) -> Reply:
    headers = dict(headers or {})
    if code == 190:
        headers["WWW-Authenticate"] = f'OAuth "Facebook Platform" "invalid_token" "{details}"'
    return Reply(ERRORS[code].http_status, error_body(code, details), headers)


def _fault_error(fault: Fault, hang_seconds: float) -> Reply:
    assert fault.error_code is not None
    headers = {"Retry-After": fault.retry_after} if fault.retry_after else {}
    reply = _error(fault.error_code, ERRORS[fault.error_code].details, headers)
    if fault.answer == "hang":
        reply.answer = "hang"
        reply.hang_seconds = hang_seconds
    return reply


def _loggable(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return raw.decode("utf-8", "replace")
