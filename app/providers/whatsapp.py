"""WhatsApp Business Cloud API: the send call, its answers, and the status webhook.

Facts from the Cloud API's public documentation. Translates and talks HTTP (through
`http.py`); knows nothing of the database or the queue.
"""

from __future__ import annotations

import json
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
    ReportedError,
    SendResult,
    StatusUpdate,
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

NAME = "whatsapp"
OBJECT = "whatsapp_business_account"
MAX_CALLBACK_DATA = 512  # biz_opaque_callback_data

# Titles are embedded in the message as "(#130429) Rate limit hit" (Meta's error-codes reference).
_TITLE_IN_MESSAGE = re.compile(r"^\(#\d+\)\s*(.+)$", re.DOTALL)


class WhatsAppProvider:
    name = NAME

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
            "Authorization": f"Bearer {credentials.token}",
            "Idempotency-Key": message.provider_key,
            "Accept": "application/json",
        }
        try:
            answer = post_json(url, build_body(message), headers, deadline)
        except TransportError as exc:
            return answers.no_answer(NAME, exc)
        return self._read_answer(answer)

    def _read_answer(self, answer: HttpAnswer) -> SendResult:
        document = json_or_none(answer.text)
        if 200 <= answer.status < 300:
            message_id = _message_id(document)
            if message_id is not None and not answer.truncated:
                return answers.accepted(answer, message_id)
        error = parse_error(answer.status, answer.text, document)
        return answers.refused(answer, error, self.classify(answer.status, error.code))

    def classify(self, http_status: int | None, code: int | None) -> FailureClass:
        return classification.classify(NAME, http_status, code)

    # 2. Webhooks

    def routing_ids(self, payload: dict[str, Any]) -> list[str]:
        found: dict[str, None] = {}
        for _, _, value in _changes(payload):
            routing_id = _routing_id(value)
            if routing_id is not None:
                found.setdefault(routing_id)
        return list(found)

    def verify_signature(self, raw_body: bytes, headers: Mapping[str, str], secret: str) -> bool:
        return hub_signature.verify(raw_body, headers, secret)

    def parse_webhook(self, payload: dict[str, Any]) -> WebhookBatch:
        batch = WebhookBatch()
        for path, field, value in _changes(payload):
            routing_id = _routing_id(value)
            for i, error in enumerate(list_at(value, "errors", path)):
                raw = object_at(error, f"{path}.errors[{i}]")
                batch.errors.append(ReportedError(routing_id, _webhook_error(raw), raw))
            if field not in (None, "messages"):
                continue  # other subscriptions (templates, account updates) carry no statuses
            statuses = list_at(value, "statuses", path)
            inbound = list_at(value, "messages", path)
            if not (statuses or inbound):
                continue
            if routing_id is None:
                # A status we cannot attribute to an identity cannot be applied safely.
                raise WebhookFormatError(f"{path}.metadata.phone_number_id missing")
            for i, item in enumerate(statuses):
                batch.statuses.append(_status(routing_id, item, f"{path}.statuses[{i}]"))
            for i, item in enumerate(inbound):
                batch.inbound.append(_inbound(routing_id, item, f"{path}.messages[{i}]"))
        return batch


def build_body(message: OutboundMessage) -> dict[str, Any]:
    """The JSON of `POST /{phone_number_id}/messages` (Meta's error-codes reference)."""
    if len(message.correlation_id) > MAX_CALLBACK_DATA:
        # Our own id (message id and cycle), never user input: a bug to fail loudly on.
        raise ValueError(f"correlation id longer than {MAX_CALLBACK_DATA} characters")
    body: dict[str, Any] = {
        "messaging_product": "whatsapp",
        "recipient_type": "individual",
        "to": message.recipient,
        "biz_opaque_callback_data": message.correlation_id,
    }
    if message.template is not None:
        body["type"] = "template"
        body["template"] = _template(message.template)
    else:
        body["type"] = "text"
        body["text"] = {"body": message.body_text, "preview_url": False}
    return body


def _template(template: Mapping[str, Any]) -> dict[str, Any]:
    language = template.get("language")
    out: dict[str, Any] = {
        "name": template["name"],
        # Callers give "en_US"; the API wants {"code": "en_US"} (and may take a policy).
        "language": dict(language) if isinstance(language, Mapping) else {"code": language},
    }
    if template.get("components"):
        out["components"] = template["components"]
    return out


def parse_error(http_status: int | None, text: str, document: Any) -> ProviderError:
    """The Graph error object, verbatim: `{"error": {"message", "type", "code",
    "error_subcode", "error_data": {"details"}, "fbtrace_id"}}`; whatever else the body is,
    it is kept in `raw`."""
    error = document.get("error") if isinstance(document, dict) else None
    if not isinstance(error, dict):
        return ProviderError(provider=NAME, http_status=http_status, raw=text)
    return _error_from(error, http_status=http_status, raw=text)


def _error_from(error: Mapping[str, Any], *, http_status: int | None, raw: str) -> ProviderError:
    """One Graph error object (a send's answer, or an entry of a webhook's `errors`)."""
    message = str_or_none(error.get("message"))
    return ProviderError(
        provider=NAME,
        http_status=http_status,
        code=int_or_none(error.get("code")),
        subcode=int_or_none(error.get("error_subcode")),
        title=_title(error, message),
        message=message,
        details=_details(error.get("error_data")),
        trace_id=str_or_none(error.get("fbtrace_id")),
        raw=raw,
    )


def _title(error: Mapping[str, Any], message: str | None) -> str | None:
    for key in ("error_user_title", "title"):
        if error.get(key):
            return str_or_none(error[key])
    if message is not None:
        match = _TITLE_IN_MESSAGE.match(message)
        if match:
            return match.group(1).strip()
    return None


def _details(error_data: Any) -> str | None:
    if isinstance(error_data, dict):
        return str_or_none(error_data.get("details"))
    return str_or_none(error_data)


def _message_id(document: Any) -> str | None:
    if not isinstance(document, dict):
        return None
    messages = document.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[0], dict):
        message_id = messages[0].get("id")
        if isinstance(message_id, str) and message_id:
            return message_id
    return None


def _webhook_error(raw: Mapping[str, Any]) -> ProviderError:
    # The webhook's bytes are stored whole with the delivery; this is the one error.
    return _error_from(
        raw, http_status=None, raw=json.dumps(raw, ensure_ascii=False, separators=(",", ":"))
    )


def _status(routing_id: str, item: Any, path: str) -> StatusUpdate:
    raw = object_at(item, path)
    return StatusUpdate(
        routing_id=routing_id,
        provider_message_id=required_str(raw, "id", path),
        status=required_str(raw, "status", path),
        provider_time=_time(raw, path),
        recipient=str_or_none(raw.get("recipient_id")),
        correlation_id=str_or_none(raw.get("biz_opaque_callback_data")),
        errors=[
            _webhook_error(object_at(e, f"{path}.errors[{i}]"))
            for i, e in enumerate(list_at(raw, "errors", path))
        ],
        raw=raw,
    )


def _inbound(routing_id: str, item: Any, path: str) -> InboundMessage:
    raw = object_at(item, path)
    return InboundMessage(
        routing_id=routing_id,
        sender=required_str(raw, "from", path),
        provider_message_id=required_str(raw, "id", path),
        provider_time=_time(raw, path),
        raw=raw,
        errors=[
            _webhook_error(object_at(e, f"{path}.errors[{i}]"))
            for i, e in enumerate(list_at(raw, "errors", path))
        ],
    )


def _changes(payload: Any) -> list[tuple[str, str | None, dict[str, Any]]]:
    """(path, field, value) of every change, after checking the envelope."""
    if not isinstance(payload, dict) or payload.get("object") != OBJECT:
        raise WebhookFormatError(f"'object' is not {OBJECT!r}")
    entries = payload.get("entry")
    if not isinstance(entries, list):
        raise WebhookFormatError("'entry' is not a list")
    found = []
    for e, entry in enumerate(entries):
        entry = object_at(entry, f"entry[{e}]")
        for c, change in enumerate(list_at(entry, "changes", f"entry[{e}]")):
            path = f"entry[{e}].changes[{c}]"
            change = object_at(change, path)
            value = change.get("value")
            if value is None:
                continue
            found.append(
                (
                    f"{path}.value",
                    str_or_none(change.get("field")),
                    object_at(value, f"{path}.value"),
                )
            )
    return found


def _routing_id(value: Mapping[str, Any]) -> str | None:
    metadata = value.get("metadata")
    if not isinstance(metadata, dict):
        return None
    return str_or_none(metadata.get("phone_number_id"))


def _time(raw: Mapping[str, Any], path: str) -> datetime:
    """Meta's `timestamp`: unix seconds, sent as a string."""
    value = raw.get("timestamp")
    try:
        return datetime.fromtimestamp(int(str(value)), UTC)
    except (TypeError, ValueError, OverflowError, OSError) as exc:
        raise WebhookFormatError(f"{path}.timestamp is not unix seconds: {value!r}") from exc
