"""The sandbox's Twilio control API under /_sandbox/twilio/ (docs/sandbox.md): register,
list, change, read accepted sends and create calls, and make a customer write in."""

import json
import random
import re
from dataclasses import asdict
from typing import Any
from urllib.parse import urlencode

from pydantic import ValidationError

from app.sandbox.poster import Delivery
from app.sandbox.twilio import (
    CONTROL_PREFIX,
    Account,
    AccountSettings,
    TwilioSandbox,
    new_sid,
    signer,
)
from app.sandbox.twilio_faults import RECIPIENT_FAULTS


class TwilioControl:
    def __init__(self, sandbox: TwilioSandbox) -> None:
        self.sandbox = sandbox

    def handle(self, method: str, path: str, query: dict[str, str], raw: bytes) -> tuple[int, Any]:
        rest = path.rstrip("/").removeprefix(CONTROL_PREFIX)
        try:
            if rest == "/accounts" and method == "POST":
                return self._register(_json(raw))
            if rest == "/accounts" and method == "GET":
                with self.sandbox.lock:
                    return 200, {"accounts": [a.settings.model_dump() for a in self._all()]}
            if rest == "/requests" and method == "GET":
                with self.sandbox.lock:
                    found = [
                        r
                        for r in self.sandbox.requests
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
                with self.sandbox.lock:
                    return 200, {"messages": list(self._account(sid).messages)}
            if tail == "/inbound" and method == "POST":
                return self._inbound(sid, _json(raw))
            return 405, {"error": f"{method} is not allowed on {path}"}
        except _ControlError as exc:
            return exc.status, exc.body

    def _all(self) -> list[Account]:
        return list(self.sandbox.accounts.values())

    def _account(self, sid: str) -> Account:
        with self.sandbox.lock:
            account = self.sandbox.accounts.get(sid)
        if account is None:
            raise _ControlError(404, f"no account {sid}")
        return account

    def _register(self, body: dict[str, Any]) -> tuple[int, Any]:
        try:
            settings = AccountSettings.model_validate(body)
        except ValidationError as exc:
            raise _ControlError(400, "invalid account", _errors(exc)) from None
        with self.sandbox.lock:
            existing = self.sandbox.accounts.get(settings.account_sid)
            if existing is None:
                self.sandbox.accounts[settings.account_sid] = Account(
                    settings, random.Random(settings.seed)
                )
                return 201, settings.model_dump()
            existing.settings = settings
            existing.rng = random.Random(settings.seed)
        return 200, settings.model_dump()

    def _update(self, sid: str, changes: dict[str, Any]) -> tuple[int, Any]:
        account = self._account(sid)
        with self.sandbox.lock:
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
            headers_for=signer(settings.auth_token, settings.inbound_url),
        )
        self.sandbox.poster.schedule(delivery, first_delay=0.0)
        return 202, {"sid": message_sid, "form": dict(form)}


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
