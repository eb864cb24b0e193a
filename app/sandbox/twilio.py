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

Control API, JSON (docs/sandbox.md):
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
from dataclasses import asdict, dataclass, field
from email.utils import formatdate
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.sandbox.poster import Delivery, WebhookPoster

API_PREFIX = "/2010-04-01/Accounts/"
CONTROL_PREFIX = "/_sandbox/twilio"
CREATE_PATH = re.compile(r"/2010-04-01/Accounts/(?P<sid>[^/]+)/Messages\.json")
MAX_BODY = 1600
CallbackStatus = Literal["sending", "sent", "delivered", "read", "undelivered", "failed"]
DEFAULT_STATUSES: tuple[CallbackStatus, ...] = ("sent", "delivered", "read")
Answer = Literal["now", "hang", "reset"]

# Twilio's error reference: https://www.twilio.com/docs/api/errors/<code>.
ERROR_TEXT: dict[int, tuple[int, str]] = {
    20003: (401, "Authenticate"),
    20404: (404, "The requested resource was not found"),
    20429: (429, "Too Many Requests"),
    20500: (500, "An internal server error has occurred"),
    21211: (400, "Invalid 'To' Phone Number"),
    21602: (400, "Message body is required."),
    21604: (400, "A 'To' phone number is required."),
    21606: (400, "The 'From' phone number provided is not a valid message-capable number"),
    21610: (400, "Attempt to send to unsubscribed recipient"),
    21614: (400, "'To' number is not a valid mobile number"),
    21617: (400, "The concatenated message body exceeds the 1600 character limit."),
    21656: (400, "The ContentVariables Parameter is invalid"),
}


@dataclass(frozen=True)
class Fault:
    name: str
    description: str
    accepts: bool = True
    answer: Answer = "now"
    error_code: int | None = None
    times: int | None = None  # answer the error this many times per message, then accept
    retry_after: str | None = None
    statuses: tuple[str, ...] | None = None  # callbacks posted, in order; None: the account's
    failure_code: int | None = None  # ErrorCode on failed / undelivered callbacks


RECIPIENT_FAULTS: dict[str, Fault] = {
    "15550000001": Fault(
        "timeout_after_accept",
        "Accepted (recorded, callbacks posted), then no answer for hang_seconds.",
        answer="hang",
    ),
    "15550000002": Fault(
        "reset_after_accept",
        "Accepted (recorded, callbacks posted), then the connection is reset (no answer).",
        answer="reset",
    ),
    "15550000003": Fault(
        "server_error_twice",
        "HTTP 500, code 20500, twice per message; the third attempt is accepted.",
        accepts=False,
        error_code=20500,
        times=2,
    ),
    "15550000004": Fault(
        "too_many_requests_once",
        "HTTP 429, code 20429, with Retry-After: 1, once per message; then accepted.",
        accepts=False,
        error_code=20429,
        times=1,
        retry_after="1",
    ),
    "15550000005": Fault(
        "invalid_to", "HTTP 400, code 21211, every time.", accepts=False, error_code=21211
    ),
    "15550000006": Fault(
        "unsubscribed", "HTTP 400, code 21610, every time.", accepts=False, error_code=21610
    ),
    "15550000007": Fault(
        "outside_24h_window",
        "Accepted; callback: failed with ErrorCode 63016 (outside the 24-hour window).",
        statuses=("failed",),
        failure_code=63016,
    ),
    "15550000008": Fault(
        "authenticate",
        "HTTP 401, code 20003, every time (even with the right Auth Token).",
        accepts=False,
        error_code=20003,
    ),
    "15550000009": Fault(
        "undelivered",
        "Accepted; callbacks: sent, then undelivered with ErrorCode 30003.",
        statuses=("sent", "undelivered"),
        failure_code=30003,
    ),
    "15550000010": Fault(
        "out_of_order",
        "Accepted; callbacks posted in the order delivered, sent, read.",
        statuses=("delivered", "sent", "read"),
    ),
    "15550000011": Fault(
        "late_sending",
        "Accepted; callbacks sent, read, then a late sending (Twilio's own step).",
        statuses=("sent", "read", "sending"),
    ),
    "15550000012": Fault(
        "not_mobile", "HTTP 400, code 21614, every time.", accepts=False, error_code=21614
    ),
}


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
                headers_for=_signer(settings.auth_token, callback_url),
            )
        return reply

    # 2. The control API

    def handle_control(
        self, method: str, path: str, query: dict[str, str], raw: bytes
    ) -> tuple[int, Any]:
        rest = path.rstrip("/").removeprefix(CONTROL_PREFIX)
        try:
            if rest == "/accounts" and method == "POST":
                return self._register(_json(raw))
            if rest == "/accounts" and method == "GET":
                with self.lock:
                    return 200, {"accounts": [a.settings.model_dump() for a in self._all()]}
            if rest == "/requests" and method == "GET":
                with self.lock:
                    found = [
                        r
                        for r in self.requests
                        if query.get("account_sid") in (None, r["account_sid"])
                    ]
                return 200, {"requests": found}
            if rest == "/faults" and method == "GET":
                return 200, {"recipients": {k: asdict(f) for k, f in RECIPIENT_FAULTS.items()}}
            match = re.fullmatch(r"/accounts/(?P<sid>[^/]+)(?P<tail>/messages|/inbound)?", rest)
            if match is None:
                return 404, {"error": f"no such endpoint: {path}"}
            sid, tail = match["sid"], match["tail"]
            if tail is None and method == "GET":
                return 200, self._account(sid).settings.model_dump()
            if tail is None and method == "PATCH":
                return self._update(sid, _json(raw))
            if tail == "/messages" and method == "GET":
                with self.lock:
                    return 200, {"messages": list(self._account(sid).messages)}
            if tail == "/inbound" and method == "POST":
                return self._inbound(sid, _json(raw))
            return 405, {"error": f"{method} is not allowed on {path}"}
        except _ControlError as exc:
            return exc.status, exc.body

    def _all(self) -> list[Account]:
        return list(self.accounts.values())

    def _account(self, sid: str) -> Account:
        with self.lock:
            account = self.accounts.get(sid)
        if account is None:
            raise _ControlError(404, f"no account {sid}")
        return account

    def _register(self, body: dict[str, Any]) -> tuple[int, Any]:
        try:
            settings = AccountSettings.model_validate(body)
        except ValidationError as exc:
            raise _ControlError(400, "invalid account", _errors(exc)) from None
        with self.lock:
            existing = self.accounts.get(settings.account_sid)
            if existing is None:
                self.accounts[settings.account_sid] = Account(
                    settings, random.Random(settings.seed)
                )
                return 201, settings.model_dump()
            existing.settings = settings
            existing.rng = random.Random(settings.seed)
        return 200, settings.model_dump()

    def _update(self, sid: str, changes: dict[str, Any]) -> tuple[int, Any]:
        account = self._account(sid)
        with self.lock:
            try:
                settings = AccountSettings.model_validate(account.settings.model_dump() | changes)
            except ValidationError as exc:
                raise _ControlError(400, "invalid change", _errors(exc)) from None
            if settings.account_sid != sid:
                raise _ControlError(400, "account_sid cannot change")
            if settings.seed != account.settings.seed:
                account.rng = random.Random(settings.seed)
            account.settings = settings
        return 200, settings.model_dump()

    def _inbound(self, sid: str, body: dict[str, Any]) -> tuple[int, Any]:
        settings = self._account(sid).settings
        if settings.inbound_url is None:
            raise _ControlError(409, "the account has no inbound_url to post to")
        sender, text = body.get("from"), body.get("text")
        if not isinstance(sender, str) or not re.fullmatch(r"[0-9]{7,15}", sender):
            raise _ControlError(400, "from must be the customer's number as a string of digits")
        if not isinstance(text, str) or not text:
            raise _ControlError(400, "text must be a non-empty string")
        to = body.get("to", settings.senders[0])
        if to not in settings.senders:
            raise _ControlError(400, f"to must be one of the account's senders {settings.senders}")
        name = body.get("name", "Sandbox Customer")
        message_sid = new_sid()
        form = [
            ("MessageSid", message_sid),
            ("SmsMessageSid", message_sid),
            ("SmsSid", message_sid),
            ("AccountSid", sid),
            ("From", f"whatsapp:+{sender}"),
            ("To", str(to)),
            ("Body", text),
            ("NumMedia", "0"),
            ("NumSegments", "1"),
            ("ProfileName", str(name)),
            ("WaId", sender),
            ("SmsStatus", "received"),
            ("MessageType", "text"),
            ("ApiVersion", "2010-04-01"),
        ]
        delivery = Delivery(
            phone_number_id=sid,
            url=settings.inbound_url,
            app_secret=settings.auth_token,
            kind="inbound",
            bodies=[urlencode(form).encode("utf-8")],
            interval=0.0,
            headers_for=_signer(settings.auth_token, settings.inbound_url),
        )
        self.poster.schedule(delivery, first_delay=0.0)
        return 202, {"sid": message_sid, "form": dict(form)}


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


def _signer(auth_token: str, url: str) -> Any:
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


class _ControlError(Exception):
    def __init__(self, status: int, message: str, details: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.body: dict[str, Any] = {"error": message}
        if details is not None:
            self.body["details"] = details


def _json(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw or b"{}")
    except (UnicodeDecodeError, ValueError):
        raise _ControlError(400, "the body must be JSON") from None
    if not isinstance(body, dict):
        raise _ControlError(400, "the body must be a JSON object")
    return body


def _errors(exc: ValidationError) -> list[dict[str, Any]]:
    return [
        {"field": ".".join(str(part) for part in error["loc"]), "message": error["msg"]}
        for error in exc.errors()
    ]
