"""WhatsApp through Twilio's Programmable Messaging: the create call, its answers, and the
status callback.

Facts from Twilio's public documentation (PROVIDERS.md section 3): the Messages resource
`POST /2010-04-01/Accounts/{AccountSid}/Messages.json`, form-encoded, HTTP basic auth with
the Account SID and Auth Token; a status callback is a form POST to the message's
`StatusCallback` URL, signed in `X-Twilio-Signature` (HMAC-SHA1 of the URL and the sorted
parameters, keyed with the Auth Token, base64). Translates and talks HTTP (through
`http.py`); knows nothing of the database or the queue.

Twilio echoes nothing of ours in a callback, so our correlation id rides in the callback
URL's query string (`?c=...`): it is covered by the signature, and finds a message whose
callback beats the create call's answer.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from . import answers, classification
from .base import (
    Credentials,
    FailureClass,
    OutboundMessage,
    ProviderError,
    SendResult,
    StatusUpdate,
    WebhookBatch,
    WebhookFormatError,
)
from .http import HttpAnswer, TransportError, call_deadline, post_form
from .parsing import header, int_or_none, json_or_none, str_or_none

NAME = "twilio"
API_VERSION = "2010-04-01"
SIGNATURE_HEADER = "x-twilio-signature"
CORRELATION_PARAM = "c"  # the query parameter of our StatusCallback URL
WHATSAPP_PREFIX = "whatsapp:"
DEFAULT_PORTS = {"http": 80, "https": 443}


class TwilioProvider:
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
        url = messages_url(credentials.base_url, credentials.account_id)
        basic = f"{credentials.account_id}:{credentials.token}".encode()
        headers = {
            "Authorization": "Basic " + base64.b64encode(basic).decode("ascii"),
            # Twilio ignores it for Messages (the webhook grace rule covers that); sent as
            # for every provider, so a sandbox that honours keys can be tested.
            "Idempotency-Key": message.provider_key,
            "Accept": "application/json",
        }
        try:
            form = build_form(credentials, message)
        except ValueError as exc:
            # A template we cannot express as Twilio content: the request is ours to fix.
            error = ProviderError(provider=NAME, title="invalid request", message=str(exc))
            return SendResult(failure=FailureClass.NEEDS_HUMAN, error=error)
        try:
            answer = post_form(url, form, headers, deadline)
        except TransportError as exc:
            return answers.no_answer(NAME, exc)
        return self._read_answer(answer)

    def _read_answer(self, answer: HttpAnswer) -> SendResult:
        document = json_or_none(answer.text)
        if 200 <= answer.status < 300:
            sid = document.get("sid") if isinstance(document, dict) else None
            if isinstance(sid, str) and sid and not answer.truncated:
                # A sid is Twilio's acceptance: our `sent`. The `queued`/`accepted` it
                # reports are its internal steps, and it never calls back for them.
                return answers.accepted(answer, sid)
        error = parse_error(answer.status, answer.text, document)
        return answers.refused(answer, error, self.classify(answer.status, error.code))

    def classify(self, http_status: int | None, code: int | None) -> FailureClass:
        return classification.classify(NAME, http_status, code)

    # 2. Status callbacks

    def routing_ids(self, payload: dict[str, Any]) -> list[str]:
        account = payload.get("AccountSid")
        return [account] if isinstance(account, str) and account else []

    def verify_signature(
        self,
        raw_body: bytes,
        headers: Mapping[str, str],
        secret: str,
        url: str | None = None,
    ) -> bool:
        """The `Provider` interface's check. Twilio signs the URL as well as the body, so
        without the URL it was requested at nothing verifies."""
        if url is None:
            return False
        signature = header(headers, SIGNATURE_HEADER)
        return verify_request(url, parse_form(raw_body), signature, secret)

    def parse_webhook(self, payload: dict[str, Any], now: datetime | None = None) -> WebhookBatch:
        """One callback's fields (the form as a dict) -> one status. The callback carries
        no event time (none in Twilio's documented fields), so the time is our receipt."""
        return WebhookBatch(statuses=[parse_callback(payload, now or datetime.now(UTC))])


def messages_url(base_url: str, account_sid: str) -> str:
    return f"{base_url.rstrip('/')}/{API_VERSION}/Accounts/{account_sid}/Messages.json"


def callback_url(base: str, correlation_id: str) -> str:
    """The identity's StatusCallback URL with this message's correlation id in its query."""
    if not correlation_id:
        return base
    parts = urlsplit(base)
    query = parse_qsl(parts.query, keep_blank_values=True)
    query.append((CORRELATION_PARAM, correlation_id))
    return urlunsplit(parts._replace(query=urlencode(query)))


def whatsapp_address(recipient: str) -> str:
    """`whatsapp:+<digits>`, as Twilio addresses a WhatsApp user (our `to` is digits)."""
    digits = recipient.removeprefix(WHATSAPP_PREFIX).lstrip("+")
    return f"{WHATSAPP_PREFIX}+{digits}"


def build_form(credentials: Credentials, message: OutboundMessage) -> list[tuple[str, str]]:
    """The form of a Messages create call. A template goes as Twilio content: its `name`
    is the Content SID (`HX...`), its body parameters the numbered `ContentVariables`."""
    if not credentials.sender:
        raise ValueError("the twilio identity has no sender (--from whatsapp:+E164)")
    form = [("To", whatsapp_address(message.recipient)), ("From", credentials.sender)]
    if message.template is not None:
        form.append(("ContentSid", str(message.template["name"])))
        variables = content_variables(message.template.get("components"))
        if variables:
            form.append(("ContentVariables", json.dumps(variables, separators=(",", ":"))))
    else:
        form.append(("Body", message.body_text or ""))
    if credentials.status_callback_url:
        form.append(
            (
                "StatusCallback",
                callback_url(credentials.status_callback_url, message.correlation_id),
            )
        )
    return form


def content_variables(components: Any) -> dict[str, str]:
    """WhatsApp-style `[{"type": "body", "parameters": [{"type": "text", "text": ...}]}]`
    -> `{"1": ..., "2": ...}`; a dict is taken as the variables themselves."""
    if not components:
        return {}
    if isinstance(components, Mapping):
        return {str(k): str(v) for k, v in components.items()}
    if not isinstance(components, list):
        raise ValueError("template components must be a list or an object of variables")
    variables: dict[str, str] = {}
    for component in components:
        if not isinstance(component, Mapping) or component.get("type") != "body":
            raise ValueError("twilio templates take body text parameters only")
        for parameter in component.get("parameters") or []:
            if not isinstance(parameter, Mapping) or "text" not in parameter:
                raise ValueError("twilio template parameters must be text")
            variables[str(len(variables) + 1)] = str(parameter["text"])
    return variables


def parse_error(http_status: int | None, text: str, document: Any) -> ProviderError:
    """Twilio's REST error, verbatim: `{"code", "message", "more_info", "status"}`; whatever
    else the body is, it is kept in `raw`."""
    if not isinstance(document, dict) or "code" not in document:
        return ProviderError(provider=NAME, http_status=http_status, raw=text)
    return ProviderError(
        provider=NAME,
        http_status=http_status,
        code=int_or_none(document.get("code")),
        message=str_or_none(document.get("message")),
        details=str_or_none(document.get("more_info")),
        raw=text,
    )


def parse_form(raw_body: bytes) -> list[tuple[str, str]]:
    """The form fields as sent, in order, blanks kept (they are signed too)."""
    try:
        text = raw_body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WebhookFormatError("the body is not UTF-8 form data") from exc
    try:
        return parse_qsl(text, keep_blank_values=True, strict_parsing=bool(text))
    except ValueError as exc:
        raise WebhookFormatError(f"the body is not form data: {exc}") from exc


def expected_signature(url: str, params: Iterable[tuple[str, str]], auth_token: str) -> str:
    """Twilio's documented algorithm: the full URL (query string included), then every
    POST parameter sorted by name (values of a repeated name sorted too), each as
    name+value with no separator; HMAC-SHA1 keyed with the Auth Token; base64."""
    signed = url + "".join(name + value for name, value in sorted(params))
    digest = hmac.new(auth_token.encode("utf-8"), signed.encode("utf-8"), hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def verify_request(
    url: str, params: list[tuple[str, str]], signature: str | None, auth_token: str
) -> bool:
    """Constant-time check of `X-Twilio-Signature`. Twilio documents that its signing is
    inconsistent about a default port (its own validator tries both), so the URL is
    checked as given and with its default port added or removed; nothing else varies."""
    if not auth_token or not signature:
        return False
    given = signature.strip().encode("utf-8", "replace")
    matched = False
    for candidate in _port_variants(url):
        expected = expected_signature(candidate, params, auth_token).encode("ascii")
        # Every variant is computed and compared: no early exit to time.
        matched |= hmac.compare_digest(expected, given)
    return matched


def _port_variants(url: str) -> list[str]:
    parts = urlsplit(url)
    default = DEFAULT_PORTS.get(parts.scheme)
    host = parts.hostname or ""
    if default is None or not host:
        return [url]
    netloc_host = f"[{host}]" if ":" in host else host
    if parts.port is None:
        other = parts._replace(netloc=f"{netloc_host}:{default}")
    elif parts.port == default:
        other = parts._replace(netloc=netloc_host)
    else:
        return [url]
    return [url, urlunsplit(other)]


def parse_callback(
    fields: Mapping[str, str], received_at: datetime, correlation_id: str | None = None
) -> StatusUpdate:
    """One status callback -> the status object the WhatsApp path produces too; the
    correlation id comes from the signed callback URL's query string."""
    sid = str_or_none(fields.get("MessageSid")) or str_or_none(fields.get("SmsSid"))
    status = str_or_none(fields.get("MessageStatus")) or str_or_none(fields.get("SmsStatus"))
    account = str_or_none(fields.get("AccountSid"))
    if not sid:
        raise WebhookFormatError("MessageSid missing")
    if not status:
        raise WebhookFormatError("MessageStatus missing")
    if not account:
        raise WebhookFormatError("AccountSid missing")
    errors = []
    code = str_or_none(fields.get("ErrorCode"))
    if code:
        errors.append(
            ProviderError(
                provider=NAME,
                code=int_or_none(code),
                message=str_or_none(fields.get("ErrorMessage"))
                or str_or_none(fields.get("ChannelStatusMessage")),
                raw=json.dumps(dict(fields), ensure_ascii=False, separators=(",", ":")),
            )
        )
    to = str_or_none(fields.get("To"))
    return StatusUpdate(
        routing_id=account,
        provider_message_id=sid,
        status=status,
        provider_time=received_at,
        recipient=to.removeprefix(WHATSAPP_PREFIX).lstrip("+") if to else None,
        correlation_id=correlation_id,
        errors=errors,
        raw=dict(fields),
    )
