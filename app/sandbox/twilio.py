"""Twilio's Messages API for WhatsApp, as Twilio documents it, and its control API.

Written from Twilio's public documentation on its own (no code shared with
`app/providers/`):

- `POST /2010-04-01/Accounts/{AccountSid}/Messages.json`, form-encoded (`To`, `From`,
  `Body` or `ContentSid` + `ContentVariables`, `StatusCallback`), HTTP basic auth with the
  Account SID and the Auth Token. A create answers 201 with the Message resource (`sid`
  `SM` + 32 hex, `status: queued`); an error answers `{code, message, more_info, status}`.
- Status callbacks: form POSTs to the message's `StatusCallback` with `MessageSid`,
  `SmsSid`, `AccountSid`, `From`, `To`, `MessageStatus`, `SmsStatus`, `ApiVersion`, and
  `ErrorCode` on `failed`/`undelivered`. None for the initial status. Signed in
  `X-Twilio-Signature`: base64 of HMAC-SHA1, keyed with the Auth Token, over the URL
  followed by each parameter's name and value, sorted by name.
- Incoming messages: a form POST to the sender's incoming-message URL with `Body`, `From`,
  `To`, `WaId`, `ProfileName`, `SmsStatus: received`, signed the same way.

The control API is `twilio_control.py`, the fault recipients `twilio_faults.py`
(docs/sandbox.md):
`POST /_sandbox/twilio/accounts` register, `GET /_sandbox/twilio/accounts` list,
`PATCH /_sandbox/twilio/accounts/<sid>` change, `GET .../<sid>/messages` accepted sends,
`POST .../<sid>/inbound` a customer writes in, `GET /_sandbox/twilio/requests` every
create call, `GET /_sandbox/twilio/faults` the fault recipients.
"""

import base64
import hashlib
import hmac
import json
import random
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode

from pydantic import BaseModel, ConfigDict, Field

from app.sandbox.poster import Delivery, WebhookPoster
from app.sandbox.twilio_faults import ERROR_TEXT, RECIPIENT_FAULTS, Answer, Fault

API_PREFIX = "/2010-04-01/Accounts/"
CONTROL_PREFIX = "/_sandbox/twilio"
CREATE_PATH = re.compile(r"/2010-04-01/Accounts/(?P<sid>[^/]+)/Messages\.json")
MAX_BODY = 1600
CallbackStatus = Literal["sending", "sent", "delivered", "read", "undelivered", "failed"]
DEFAULT_STATUSES: tuple[CallbackStatus, ...] = ("sent", "delivered", "read")


class AccountSettings(BaseModel):
    """A Twilio account in the sandbox and how it behaves (the control API's body)."""

    model_config = ConfigDict(extra="forbid")

    account_sid: str = Field(pattern=r"^AC[0-9A-Za-z]{1,40}$")
    auth_token: str = Field(min_length=1)
    senders: list[str] = Field(min_length=1)  # e.g. ["whatsapp:+15550100000"]
    inbound_url: str | None = Field(default=None, pattern=r"^https?://")
    honour_idempotency_keys: bool = False  # Twilio documents none for Messages
    callback_delay_ms: int = Field(default=0, ge=0)
    duplicate_callbacks: bool = False
    shuffle_callbacks: bool = False
    statuses: list[CallbackStatus] = Field(default_factory=lambda: list(DEFAULT_STATUSES))
    seed: int | None = None
    hang_seconds: float = Field(default=30.0, ge=0)


@dataclass
class Account:
    settings: AccountSettings
    rng: random.Random
    fault_counts: dict[str, int] = field(default_factory=dict)
    answers_by_key: dict[str, dict[str, Any]] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Reply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    answer: Answer = "now"
    hang_seconds: float = 0.0
    callbacks: Delivery | None = None
    callback_delay: float = 0.0


def signature(auth_token: str, url: str, params: list[tuple[str, str]]) -> str:
    """`X-Twilio-Signature` as Twilio documents it."""
    data = url + "".join(name + value for name, value in sorted(params))
    mac = hmac.new(auth_token.encode("utf-8"), data.encode("utf-8"), hashlib.sha1)
    return base64.b64encode(mac.digest()).decode("ascii")


def new_sid(prefix: str = "SM") -> str:
    return prefix + secrets.token_hex(16)


class TwilioSandbox:
    def __init__(self, poster: WebhookPoster) -> None:
        self.poster = poster
        self.lock = threading.RLock()
        self.accounts: dict[str, Account] = {}
        self.requests: list[dict[str, Any]] = []

    def reset(self) -> None:
        with self.lock:
            self.accounts.clear()
            self.requests.clear()

    # 1. The Messages API

    def handle_create(self, path: str, headers: dict[str, str], raw: bytes) -> Reply | None:
        """A create call; None if the path is not the Messages resource."""
        match = CREATE_PATH.fullmatch(path)
        if match is None:
            return None
        sid = match["sid"]
        lower = {name.lower(): value for name, value in headers.items()}
        now = time.time()
        entry: dict[str, Any] = {
            "time": now,
            "account_sid": sid,
            "headers": _without_auth(headers),
            "body": raw.decode("utf-8", "replace"),
            "idempotency_key": lower.get("idempotency-key"),
            "fault": None,
            "sid": None,
            "outcome": "rejected",
        }
        with self.lock:
            reply = self._decide(sid, lower, raw, now, entry)
            entry["http_status"] = None if reply.answer == "reset" else reply.status
            entry["error_code"] = reply.body.get("code") if reply.status >= 300 else None
            entry["answer"] = reply.answer
            self.requests.append(entry)
        if reply.callbacks is not None:
            self.poster.schedule(reply.callbacks, reply.callback_delay)
        return reply

    def _decide(
        self, sid: str, headers: dict[str, str], raw: bytes, now: float, entry: dict[str, Any]
    ) -> Reply:
        account = self.accounts.get(sid)
        if account is None or not _authorised(headers.get("authorization", ""), account):
            return _error(20003)
        settings = account.settings
        try:
            form = parse_qsl(raw.decode("utf-8"), keep_blank_values=True, strict_parsing=bool(raw))
        except (UnicodeDecodeError, ValueError):
            return _error(21604, "the body is not form data")
        fields = dict(form)
        to, sender = fields.get("To", ""), fields.get("From", "")
        entry["to"] = to
        if not to:
            return _error(21604)
        if not re.fullmatch(r"whatsapp:\+[1-9][0-9]{6,14}", to):
            return _error(21211, f"Invalid 'To' Phone Number: {to}")
        if sender not in settings.senders:
            return _error(21606, f"The 'From' number {sender} is not a valid sender")
        body = fields.get("Body")
        content_sid = fields.get("ContentSid")
        if not body and not content_sid:
            return _error(21602)
        if body and len(body) > MAX_BODY:
            return _error(21617)
        if content_sid and fields.get("ContentVariables"):
            try:
                variables = json.loads(fields["ContentVariables"])
            except ValueError:
                variables = None
            if not isinstance(variables, dict):
                return _error(21656)
        key = entry["idempotency_key"]
        if settings.honour_idempotency_keys and key and key in account.answers_by_key:
            answer = account.answers_by_key[key]
            entry["outcome"] = "replayed"
            entry["sid"] = answer["sid"]
            return Reply(201, answer)

        fault = RECIPIENT_FAULTS.get(to.removeprefix("whatsapp:+"))
        entry["fault"] = fault.name if fault else None
        if fault and fault.times is not None:
            message_key = f"key:{key}" if key else "body:" + raw.decode("utf-8", "replace")
            served = account.fault_counts.get(message_key, 0)
            if served >= fault.times:
                fault = None
            else:
                account.fault_counts[message_key] = served + 1
        if fault and not fault.accepts:
            assert fault.error_code is not None
            reply = _error(fault.error_code)
            if fault.retry_after:
                reply.headers["Retry-After"] = fault.retry_after
            return reply

        message_sid = new_sid()
        stamp = formatdate(now, usegmt=True)
        answer = {
            "account_sid": sid,
            "api_version": "2010-04-01",
            "body": body or "",
            "date_created": stamp,
            "date_sent": None,
            "date_updated": stamp,
            "direction": "outbound-api",
            "error_code": None,
            "error_message": None,
            "from": sender,
            "messaging_service_sid": None,
            "num_media": "0",
            "num_segments": "1",
            "price": None,
            "price_unit": None,
            "sid": message_sid,
            "status": "queued",
            "subresource_uris": {
                "media": f"/2010-04-01/Accounts/{sid}/Messages/{message_sid}/Media.json"
            },
            "to": to,
            "uri": f"/2010-04-01/Accounts/{sid}/Messages/{message_sid}.json",
        }
        account.messages.append(
            {
                "sid": message_sid,
                "to": to,
                "from": sender,
                "time": now,
                "idempotency_key": key,
                "headers": entry["headers"],
                "form": fields,
            }
        )
        if settings.honour_idempotency_keys and key:
            account.answers_by_key[key] = answer
        entry["outcome"] = "accepted"
        entry["sid"] = message_sid
        callback_url = fields.get("StatusCallback")
        statuses = list(fault.statuses if fault and fault.statuses else settings.statuses)
        reply = Reply(201, answer, callback_delay=settings.callback_delay_ms / 1000)
        if fault is not None:
            reply.answer = fault.answer
            reply.hang_seconds = settings.hang_seconds
        if callback_url and statuses:
            if settings.shuffle_callbacks:
                account.rng.shuffle(statuses)
            if settings.duplicate_callbacks:
                statuses = [s for status in statuses for s in (status, status)]
            forms = [
                _callback_form(sid, message_sid, sender, to, status, fault) for status in statuses
            ]
            reply.callbacks = Delivery(
                phone_number_id=sid,
                url=callback_url,
                app_secret=settings.auth_token,
                kind="statuses",
                bodies=[urlencode(f).encode("utf-8") for f in forms],
                interval=0.05,
                headers_for=signer(settings.auth_token, callback_url),
            )
        return reply


def _callback_form(
    account_sid: str, message_sid: str, sender: str, to: str, status: str, fault: Fault | None
) -> list[tuple[str, str]]:
    form = [
        ("AccountSid", account_sid),
        ("ApiVersion", "2010-04-01"),
        ("ChannelPrefix", "whatsapp"),
        ("From", sender),
        ("MessageSid", message_sid),
        ("MessageStatus", status),
        ("SmsSid", message_sid),
        ("SmsStatus", status),
        ("To", to),
    ]
    if status in ("failed", "undelivered"):
        code = fault.failure_code if fault and fault.failure_code else 30008
        form.append(("ErrorCode", str(code)))
    return form


def signer(auth_token: str, url: str) -> Any:
    def headers_for(body: bytes) -> dict[str, str]:
        params = parse_qsl(body.decode("utf-8"), keep_blank_values=True)
        return {
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Twilio-Signature": signature(auth_token, url, params),
            "User-Agent": "TwilioProxy/1.1",
        }

    return headers_for


def _authorised(header: str, account: Account) -> bool:
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        user, _, password = base64.b64decode(encoded, validate=True).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        return False
    expected = f"{account.settings.account_sid}:{account.settings.auth_token}".encode()
    return hmac.compare_digest(f"{user}:{password}".encode(), expected)


def _without_auth(headers: dict[str, str]) -> dict[str, str]:
    return {k: ("[redacted]" if k.lower() == "authorization" else v) for k, v in headers.items()}


def _error(code: int, message: str | None = None) -> Reply:
    status, text = ERROR_TEXT.get(code, (400, "Error"))
    body = {
        "code": code,
        "message": message or text,
        "more_info": f"https://www.twilio.com/docs/errors/{code}",
        "status": status,
    }
    return Reply(status, body)
