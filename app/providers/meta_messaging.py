"""Messenger and Instagram: the Send API with a Page token, its answers, and the webhook.

Facts from Meta's Messenger Platform documentation (Send API reference, webhook events
reference, common error codes) and the Instagram Messaging webhooks page. One module for
both: they share the Send API, the error codes and the webhook envelope, and differ in the
envelope's `object` (`page` / `instagram`) and in how a read arrives (`read.watermark` on
Messenger, `messaging_seen` on Instagram). Translates and talks HTTP (through `http.py`);
knows nothing of the database or the queue.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from . import answers, classification, hub_signature
from .base import (
    Credentials,
    FailureClass,
    InboundMessage,
    OutboundMessage,
    ProviderError,
    SendResult,
    StatusUpdate,
    Watermark,
    WebhookBatch,
    WebhookFormatError,
)
from .http import HttpAnswer, TransportError, call_deadline, post_json
from .parsing import (
    int_or_none,
    json_or_none,
    list_at,
    object_at,
    required_str,
    str_or_none,
)

# The tags this issue supports: a human agent's reply up to 7 days after the customer's
# last message (Messenger and Instagram alike).
TAGS = frozenset({"HUMAN_AGENT"})
MAX_METADATA = 1000  # the Send API's `message.metadata`, echoed back in message_echoes
# A person's actions, other than writing, that open the window (see `_person_acted`).
WINDOW_OPENERS = ("postback", "referral", "reaction")

_TITLE_IN_MESSAGE = re.compile(r"^\(#\d+\)\s*(.+)$", re.DOTALL)


class MetaMessagingProvider:
    """One of the two: `MetaMessagingProvider("messenger", "page")` or
    `MetaMessagingProvider("instagram", "instagram")` (the envelope's `object`)."""

    def __init__(self, name: str, object_name: str) -> None:
        self.name = name
        self.object_name = object_name

    # 1. Sending

    def send(
        self,
        credentials: Credentials,
        message: OutboundMessage,
        *,
        timeout: float,
        not_after: float | None = None,
    ) -> SendResult:
        deadline = call_deadline(timeout, not_after)
        url = f"{credentials.base_url.rstrip('/')}/{credentials.account_id}/messages"
        headers = {
            # The Graph API takes the token as a Bearer header as well as `access_token`;
            # the header keeps it out of URLs, and so out of access logs.
            "Authorization": f"Bearer {credentials.token}",
            "Idempotency-Key": message.provider_key,
            "Accept": "application/json",
        }
        try:
            body = build_body(message)
        except ValueError as exc:
            # A template or an unknown tag never reaches here past the API; if one does,
            # it is a definite refusal of ours, not the provider's.
            error = ProviderError(provider=self.name, title="not sendable", message=str(exc))
            return SendResult(failure=FailureClass.PERMANENT, error=error)
        try:
            answer = post_json(url, body, headers, deadline)
        except TransportError as exc:
            return answers.no_answer(self.name, exc)
        return self._read_answer(answer)

    def _read_answer(self, answer: HttpAnswer) -> SendResult:
        document = json_or_none(answer.text)
        if 200 <= answer.status < 300:
            message_id = _message_id(document)
            if message_id is not None and not answer.truncated:
                return answers.accepted(answer, message_id)
        error = parse_error(self.name, answer.status, answer.text, document)
        failure = classification.classify(self.name, answer.status, error.code, error.subcode)
        return answers.refused(answer, error, failure)

    def classify(self, http_status: int | None, code: int | None) -> FailureClass:
        return classification.classify(self.name, http_status, code)

    # 2. Webhooks

    def routing_ids(self, payload: dict[str, Any]) -> list[str]:
        found: dict[str, None] = {}
        for e, entry in enumerate(self._entries(payload)):
            found.setdefault(required_str(entry, "id", f"entry[{e}]"))
        return list(found)

    def verify_signature(self, raw_body: bytes, headers: Mapping[str, str], secret: str) -> bool:
        """As for WhatsApp (for Messenger marked unverified in PROVIDERS.md section 2)."""
        return hub_signature.verify(raw_body, headers, secret)

    def parse_webhook(self, payload: dict[str, Any]) -> WebhookBatch:
        """Every event of every entry: deliveries and reads (by mid, or as a watermark),
        and inbound messages (echoes of our own sends are not inbound)."""
        batch = WebhookBatch()
        for e, entry in enumerate(self._entries(payload)):
            path = f"entry[{e}]"
            routing_id = required_str(entry, "id", path)
            for i, event in enumerate(list_at(entry, "messaging", path)):
                self._event(batch, routing_id, object_at(event, f"{path}.messaging[{i}]"), path, i)
        return batch

    def _event(
        self, batch: WebhookBatch, routing_id: str, event: dict[str, Any], path: str, i: int
    ) -> None:
        where = f"{path}.messaging[{i}]"
        message = event.get("message")
        if isinstance(message, dict) and message.get("is_echo"):
            # Our Page sent a message (message_echoes; on Instagram, `messages` with
            # is_echo): Meta has it, which is our `sent`. It carries back the `metadata` we
            # sent, our correlation id, so an answer lost on the wire is matched too.
            batch.statuses.append(
                StatusUpdate(
                    routing_id=routing_id,
                    provider_message_id=required_str(message, "mid", f"{where}.message"),
                    status="sent",
                    provider_time=_ms_time(event.get("timestamp"), f"{where}.timestamp"),
                    recipient=_party(event, "recipient", where),
                    correlation_id=str_or_none(message.get("metadata")),
                    raw=event,
                )
            )
            return
        if not any(kind in event for kind in ("delivery", "read", "message")):
            self._person_acted(batch, routing_id, event, where)
            return
        customer = _party(event, "sender", where)
        if "delivery" in event:
            delivery = object_at(event["delivery"], f"{where}.delivery")
            self._receipt(batch, routing_id, customer, "delivered", delivery, event, where)
        elif "read" in event:
            # Messenger's message_reads: `read.watermark`; Instagram's messaging_seen:
            # `read.mid` (the shape PROVIDERS.md marks unverified; a watermark is taken too).
            read = object_at(event["read"], f"{where}.read")
            self._receipt(batch, routing_id, customer, "read", read, event, where)
        elif "message" in event:
            message = object_at(message, f"{where}.message")
            batch.inbound.append(
                InboundMessage(
                    routing_id=routing_id,
                    sender=customer,
                    provider_message_id=required_str(message, "mid", f"{where}.message"),
                    provider_time=_ms_time(event.get("timestamp"), f"{where}.timestamp"),
                    raw=event,
                )
            )

    def _person_acted(
        self, batch: WebhookBatch, routing_id: str, event: dict[str, Any], where: str
    ) -> None:
        """A tapped button (`postback`), an m.me / ig.me link or an ad into an existing
        thread (`referral`), or a reaction to a message (`reaction`) is the person writing
        in, as far as the window goes: Meta's policy lists "clicks a call-to-action button",
        "clicks an m.me / ig.me link ... to enter an existing conversation" and "reacts to a
        message" among the user actions that open the standard messaging window
        (developers.facebook.com/documentation/business-messaging/messenger-platform/policy/,
        "User actions that open the standard messaging window"; Messenger and Instagram).
        Opt-ins, policy notices and the rest open nothing; some carry no `sender` at all
        (a checkbox opt-in, a chat plugin's `user_ref`), so nothing else of them is read:
        they must not cost their neighbours."""
        kind = next((kind for kind in WINDOW_OPENERS if isinstance(event.get(kind), dict)), None)
        sender = event.get("sender")
        customer = sender.get("id") if isinstance(sender, dict) else None
        if kind is None or not isinstance(customer, str) or not customer:
            return
        try:
            provider_time = _ms_time(event.get("timestamp"), f"{where}.timestamp")
        except WebhookFormatError:
            return  # no time to count the window from: kept in the raw delivery only
        mid = str_or_none(event[kind].get("mid")) or f"{kind}:{event.get('timestamp')}"
        batch.inbound.append(
            InboundMessage(
                routing_id=routing_id,
                sender=customer,
                provider_message_id=mid,
                provider_time=provider_time,
                raw=event,
            )
        )

    def _receipt(
        self,
        batch: WebhookBatch,
        routing_id: str,
        customer: str,
        status: str,
        receipt: dict[str, Any],
        event: dict[str, Any],
        where: str,
    ) -> None:
        mids = list_at(receipt, "mids", where)
        single = receipt.get("mid")
        if single is not None:
            mids = [*mids, single]
        watermark = receipt.get("watermark")
        when = event.get("timestamp", watermark)
        # The field the time was read from, for the error that names it.
        when_path = f"{where}.timestamp" if "timestamp" in event else f"{where}.watermark"
        if mids:
            provider_time = _ms_time(when, when_path)
            for j, mid in enumerate(mids):
                if not isinstance(mid, str) or not mid:
                    raise WebhookFormatError(f"{where}.mids[{j}] is not a message id")
                batch.statuses.append(
                    StatusUpdate(
                        routing_id=routing_id,
                        provider_message_id=mid,
                        status=status,
                        provider_time=provider_time,
                        recipient=customer,
                        correlation_id=None,
                        raw=event,
                    )
                )
            return
        if watermark is None:
            raise WebhookFormatError(f"{where}: a {status} receipt with neither mids nor watermark")
        watermark_ms = _ms(watermark, f"{where}.watermark")
        batch.watermarks.append(
            Watermark(
                routing_id=routing_id,
                recipient=customer,
                status=status,
                watermark_ms=watermark_ms,
                provider_time=_ms_time(when, when_path),
                raw=event,
            )
        )

    def _entries(self, payload: Any) -> list[dict[str, Any]]:
        if not isinstance(payload, dict) or payload.get("object") != self.object_name:
            # The view says whose webhook it is not; these say what is wrong.
            raise WebhookFormatError(f"'object' is not {self.object_name!r}")
        entries = payload.get("entry")
        if not isinstance(entries, list):
            raise WebhookFormatError("'entry' is not a list")
        return [object_at(entry, f"entry[{e}]") for e, entry in enumerate(entries)]


def build_body(message: OutboundMessage) -> dict[str, Any]:
    """The JSON of `POST /{page-id}/messages` (Send API reference): text only.

    `messaging_type` is RESPONSE (a reply inside the customer's window) unless a tag is
    given, which sends MESSAGE_TAG with it. Outside the window the Send API answers
    code 10 with subcode 2018278, which the classification makes `permanent`.
    """
    if message.template is not None:
        raise ValueError("Messenger and Instagram take text only here, not a template")
    if len(message.correlation_id) > MAX_METADATA:
        raise ValueError(f"correlation id longer than {MAX_METADATA} characters")
    body: dict[str, Any] = {
        "recipient": {"id": message.recipient},
        "messaging_type": "RESPONSE",
        # `metadata` comes back in the echo of this message: our correlation id.
        "message": {"text": message.body_text, "metadata": message.correlation_id},
    }
    if message.tag is not None:
        if message.tag not in TAGS:
            raise ValueError(f"unsupported message tag {message.tag!r}")
        body["messaging_type"] = "MESSAGE_TAG"
        body["tag"] = message.tag
    return body


def parse_error(provider: str, http_status: int | None, text: str, document: Any) -> ProviderError:
    """The Graph error object, verbatim: `{"error": {"message", "type", "code",
    "error_subcode", "error_data", "fbtrace_id"}}`; any other body is kept in `raw`."""
    error = document.get("error") if isinstance(document, dict) else None
    if not isinstance(error, dict):
        return ProviderError(provider=provider, http_status=http_status, raw=text)
    message = str_or_none(error.get("message"))
    title = str_or_none(error.get("error_user_title"))
    if title is None and message is not None:
        match = _TITLE_IN_MESSAGE.match(message)
        title = match.group(1).strip() if match else None
    error_data = error.get("error_data")
    details = (
        str_or_none(error_data.get("details"))
        if isinstance(error_data, dict)
        else str_or_none(error_data)
    )
    return ProviderError(
        provider=provider,
        http_status=http_status,
        code=int_or_none(error.get("code")),
        subcode=int_or_none(error.get("error_subcode")),
        title=title,
        message=message,
        details=details,
        trace_id=str_or_none(error.get("fbtrace_id")),
        raw=text,
    )


def _message_id(document: Any) -> str | None:
    """`{"recipient_id": "...", "message_id": "..."}` (Send API reference)."""
    if not isinstance(document, dict):
        return None
    message_id = document.get("message_id")
    return message_id if isinstance(message_id, str) and message_id else None


def _party(event: Mapping[str, Any], key: str, where: str) -> str:
    party = object_at(event.get(key), f"{where}.{key}")
    return required_str(party, "id", f"{where}.{key}")


def _ms(value: Any, path: str) -> int:
    if isinstance(value, bool):
        raise WebhookFormatError(f"{path} is not milliseconds: {value!r}")
    try:
        ms = int(str(value))
    except (TypeError, ValueError) as exc:
        raise WebhookFormatError(f"{path} is not milliseconds: {value!r}") from exc
    if not 0 <= ms < 10**14:  # beyond the year 5000: no real watermark
        raise WebhookFormatError(f"{path} is not milliseconds since 1970: {value!r}")
    return ms


def _ms_time(value: Any, path: str) -> datetime:
    """Meta's Messenger timestamps and watermarks: milliseconds since the epoch."""
    return datetime.fromtimestamp(_ms(value, path) / 1000, UTC)
