"""Messenger and Instagram: Pages (and Instagram accounts) and their Send API.

Written from Meta's Messenger Platform documentation alone (Send API reference, webhook
events reference, common error codes, the Instagram Messaging webhooks page); it shares no
code with `app/providers/`. ``POST /{version}/{page-id}/messages`` is the same path as the
Cloud API's: the server routes it here when the id is a registered Page.

What it models: the Page token; the customer's messaging window (24 h after the customer
last wrote for RESPONSE / UPDATE, 7 days for MESSAGE_TAG with HUMAN_AGENT; outside it,
code 10 with subcode 2018278); fault recipients; and the receipts a customer's phone
causes: Messenger `message_deliveries` (with `mids`, or only a `watermark` as older clients
send) and `message_reads` (a watermark), Instagram `messaging_seen` (the read message's
`mid`; that shape is unverified, see PROVIDERS.md section 2). Receipts are posted late,
duplicated or shuffled on request.
"""

import hmac
import json
import random
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from app.sandbox.errors import new_fbtrace_id
from app.sandbox.page_events import (
    PageSettings,
    delivery_event,
    echo_event,
    envelope,
    read_event,
    seen_event,
)
from app.sandbox.page_faults import PAGE_FAULTS, PageFault
from app.sandbox.poster import Delivery
from app.sandbox.state import SandboxState
from app.sandbox.webhooks import encode
from app.sandbox.whatsapp import Reply

MAX_TEXT = 2000  # the Send API's text limit, in characters
MAX_METADATA = 1000  # message.metadata, echoed back in message_echoes
WINDOW_SECONDS = 24 * 60 * 60
HUMAN_AGENT_SECONDS = 7 * 24 * 60 * 60
MESSAGING_TYPES = ("RESPONSE", "UPDATE", "MESSAGE_TAG")
TAGS = ("HUMAN_AGENT", "CONFIRMED_EVENT_UPDATE", "POST_PURCHASE_UPDATE", "ACCOUNT_UPDATE")


@dataclass
class Page:
    settings: PageSettings
    rng: random.Random
    admitted: list[float] = field(default_factory=list)
    fault_counts: dict[str, int] = field(default_factory=dict)
    answers_by_key: dict[str, dict[str, Any]] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)
    # Customer id -> when (sandbox ms) they last wrote: the messaging window.
    last_inbound_ms: dict[str, int] = field(default_factory=dict)

    def now_ms(self) -> int:
        return int(time.time() * 1000) + self.settings.clock_offset_ms

    def is_rate_limited(self, now: float) -> bool:
        limit = self.settings.rate_limit_mps
        self.admitted = [t for t in self.admitted if t > now - 1.0]
        if limit is not None and len(self.admitted) >= limit:
            return True
        self.admitted.append(now)
        return False


class PagesState:
    """Pages by id, under one lock (taken before the sandbox state's, never after)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.pages: dict[str, Page] = {}

    def register(self, settings: PageSettings) -> bool:
        with self.lock:
            existing = self.pages.get(settings.page_id)
            if existing is None:
                self.pages[settings.page_id] = Page(settings, random.Random(settings.seed))
                return True
            existing.settings = settings
            return False

    def update(self, page_id: str, changes: dict[str, Any]) -> PageSettings | None:
        with self.lock:
            page = self.pages.get(page_id)
            if page is None:
                return None
            settings = PageSettings.model_validate(page.settings.model_dump() | changes)
            if settings.page_id != page_id:
                raise ValueError("page_id cannot change")
            page.settings = settings
            return settings

    def knows(self, page_id: str) -> bool:
        with self.lock:
            return page_id in self.pages

    def get(self, page_id: str) -> Page | None:
        with self.lock:
            return self.pages.get(page_id)

    def reset(self) -> None:
        with self.lock:
            self.pages.clear()


def handle_page_send(
    pages: PagesState, state: SandboxState, page_id: str, headers: dict[str, str], raw: bytes
) -> Reply:
    now = time.time()
    lower = {name.lower(): value for name, value in headers.items()}
    entry: dict[str, Any] = {
        "time": now,
        "phone_number_id": page_id,  # the log's key for "which sender", as for numbers
        "headers": headers,
        "body": _loggable(raw),
        "idempotency_key": lower.get("idempotency-key"),
        "fault": None,
        "wamid": None,
    }
    with pages.lock:
        reply = _decide(pages.pages.get(page_id), page_id, lower, raw, now, entry)
        entry["outcome"] = entry.get("outcome", "rejected")
        entry["http_status"] = None if reply.answer == "reset" else reply.status
        entry["error_code"] = reply.body.get("error", {}).get("code")
        entry["answer"] = reply.answer
    state.log_request(entry)
    return reply


class _Refused(Exception):
    def __init__(self, http_status: int, code: int, message: str, subcode: int | None = None):
        super().__init__(message)
        self.reply = graph_error(http_status, code, message, subcode)


def _decide(
    page: Page | None,
    page_id: str,
    headers: dict[str, str],
    raw: bytes,
    now: float,
    entry: dict[str, Any],
) -> Reply:
    try:
        if page is None:
            raise _Refused(
                400,
                100,
                f"Unsupported post request. Object with ID '{page_id}' does not exist, cannot "
                "be loaded due to missing permissions, or does not support this operation",
                33,
            )
        settings = page.settings
        if not _is_authorised(headers, settings.token):
            raise _Refused(401, 190, "Invalid OAuth access token.")
        if page.is_rate_limited(now):
            raise _Refused(400, 613, "Calls to this api have exceeded the rate limit.")
        payload = _validate(raw)
    except _Refused as refused:
        return refused.reply
    recipient = payload["recipient"]["id"]
    entry["to"] = recipient
    key = entry["idempotency_key"]
    if settings.honour_idempotency_keys and key and key in page.answers_by_key:
        answer = page.answers_by_key[key]
        entry["outcome"] = "replayed"
        entry["wamid"] = answer["message_id"]
        return Reply(200, answer)

    fault = PAGE_FAULTS.get(recipient)
    entry["fault"] = fault.name if fault else None
    if fault and fault.times is not None:
        message_key = f"key:{key}" if key else "body:" + raw.decode("utf-8", "replace")
        served = page.fault_counts.get(message_key, 0)
        if served >= fault.times:
            fault = None
        else:
            page.fault_counts[message_key] = served + 1
    if fault and not fault.accepts:
        assert fault.code is not None
        reply = graph_error(fault.http_status, fault.code, fault.message, fault.subcode)
        if fault.answer == "hang":
            reply.answer, reply.hang_seconds = "hang", settings.hang_seconds
        return reply

    now_ms = page.now_ms()
    window_problem = _window_problem(page, recipient, payload, now_ms)
    if window_problem is not None:
        return graph_error(400, 10, window_problem, 2018278)

    mid = new_mid()
    answer = {"recipient_id": recipient, "message_id": mid}
    page.messages.append(
        {
            "mid": mid,
            "to": recipient,
            "time": now,
            "time_ms": now_ms,
            "idempotency_key": key,
            "headers": entry["headers"],
            "body": payload,
        }
    )
    if settings.honour_idempotency_keys and key:
        page.answers_by_key[key] = answer
    entry["outcome"] = "accepted"
    entry["wamid"] = mid
    return Reply(
        200,
        answer,
        answer=fault.answer if fault else "now",
        hang_seconds=settings.hang_seconds,
        webhooks=plan_receipts(page, recipient, mid, now_ms, fault, payload["message"]),
        webhook_delay=settings.webhook_delay_ms / 1000,
    )


def _window_problem(page: Page, recipient: str, payload: dict[str, Any], now_ms: int) -> str | None:
    last = page.last_inbound_ms.get(recipient)
    if payload["messaging_type"] == "MESSAGE_TAG":
        allowed = HUMAN_AGENT_SECONDS if payload["tag"] == "HUMAN_AGENT" else None
        if allowed is None:
            return None  # the other tags: not modelled here, accepted as the docs allow
    else:
        allowed = WINDOW_SECONDS
    if last is None or now_ms - last > allowed * 1000:
        return "This message is sent outside of allowed window."
    return None


def _validate(raw: bytes) -> dict[str, Any]:
    try:
        payload = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise _Refused(400, 100, "Invalid JSON for postcard parameter") from None
    if not isinstance(payload, dict):
        raise _Refused(400, 100, "The request body must be a JSON object.")
    recipient = payload.get("recipient")
    if not isinstance(recipient, dict) or not isinstance(recipient.get("id"), str):
        raise _Refused(400, 100, "(#100) param recipient must be non-empty.")
    if not recipient["id"]:
        raise _Refused(400, 100, "(#100) param recipient must be non-empty.")
    messaging_type = payload.get("messaging_type")
    if messaging_type not in MESSAGING_TYPES:
        raise _Refused(400, 100, f"(#100) messaging_type must be one of {MESSAGING_TYPES}")
    if messaging_type == "MESSAGE_TAG":
        if payload.get("tag") not in TAGS:
            raise _Refused(400, 100, "(#100) Tag is required for MESSAGE_TAG messaging type")
    elif "tag" in payload:
        raise _Refused(400, 100, "(#100) tag is only valid with messaging_type MESSAGE_TAG")
    message = payload.get("message")
    if not isinstance(message, dict) or "text" not in message:
        raise _Refused(400, 100, "(#100) param message must be non-empty.")
    text = message["text"]
    if not isinstance(text, str) or not text or len(text) > MAX_TEXT:
        raise _Refused(400, 100, f"(#100) Length of param message[text] must be 1 to {MAX_TEXT}")
    metadata = message.get("metadata")
    if metadata is not None and (not isinstance(metadata, str) or len(metadata) > MAX_METADATA):
        raise _Refused(400, 100, f"(#100) metadata must be a string of at most {MAX_METADATA}")
    return payload


def plan_receipts(
    page: Page,
    recipient: str,
    mid: str,
    sent_ms: int,
    fault: PageFault | None,
    message: dict[str, Any],
) -> Delivery:
    """The receipts one message causes, as POST bodies: duplicated, shuffled, batched as
    the Page asks. Timestamps follow the real order (delivery, then read) whatever order
    the posts go out in, since Meta stamps events when they happen."""
    settings = page.settings
    receipts = fault.receipts if fault and fault.receipts else tuple(settings.receipts)
    with_mids = settings.delivery_mids
    if fault and fault.delivery_mids is not None:
        with_mids = fault.delivery_mids
    step = max(1, settings.webhook_delay_ms)
    events = []
    if settings.echoes:
        events.append(echo_event(settings, recipient, mid, message, sent_ms))
    for receipt in receipts:
        at = sent_ms + step * (1 if receipt == "delivered" else 2)
        if settings.platform == "instagram":
            if receipt == "read":
                events.append(seen_event(settings, recipient, mid, at))
        elif receipt == "delivered":
            events.append(delivery_event(settings, recipient, [mid] if with_mids else None, at))
        else:
            events.append(read_event(settings, recipient, at))
    if settings.duplicate_webhooks:
        events = [event for event in events for _ in range(2)]
    if settings.shuffle_webhooks:
        page.rng.shuffle(events)
    groups = [events] if settings.batch_webhooks else [[event] for event in events]
    return Delivery(
        phone_number_id=settings.page_id,
        url=settings.webhook_url,
        app_secret=settings.app_secret,
        kind="receipts",
        bodies=[encode(envelope(settings, group, sent_ms)) for group in groups if group],
        interval=settings.webhook_delay_ms / 1000,
    )


def graph_error(http_status: int, code: int, message: str, subcode: int | None = None) -> Reply:
    error: dict[str, Any] = {"message": message, "type": "OAuthException", "code": code}
    if subcode is not None:
        error["error_subcode"] = subcode
    error["fbtrace_id"] = new_fbtrace_id()
    return Reply(http_status, {"error": error})


def new_mid() -> str:
    # Shaped like the documented examples' ids ("m_AG5Hz2U..."): opaque, URL-safe.
    return "m_" + secrets.token_urlsafe(48)


def _is_authorised(headers: dict[str, str], token: str) -> bool:
    """`Authorization: Bearer <token>` or nothing: the query-string form is not taken here
    (it puts the token in URLs, and Ratchet never sends it so)."""
    scheme, _, presented = headers.get("authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(
        presented.strip().encode(), token.encode()
    )


def _loggable(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return raw.decode("utf-8", "replace")
