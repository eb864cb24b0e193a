"""The control API under /_sandbox/: the only way to configure the sandbox (docs/sandbox.md)."""

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from app.sandbox.faults import describe_faults
from app.sandbox.page_control import PageControl
from app.sandbox.pages import PagesState
from app.sandbox.poster import Delivery, WebhookPoster
from app.sandbox.state import NumberSettings, SandboxState
from app.sandbox.webhooks import encode, envelope, inbound_value
from app.sandbox.whatsapp import new_wamid

JSON = Any


class ControlError(Exception):
    def __init__(self, status: int, message: str, details: JSON = None) -> None:
        super().__init__(message)
        self.status = status
        self.body: dict[str, JSON] = {"error": message}
        if details is not None:
            self.body["details"] = details


@dataclass
class Request:
    params: dict[str, str]
    query: dict[str, str]
    raw: bytes

    def json(self) -> dict[str, JSON]:
        try:
            body = json.loads(self.raw or b"{}")
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise ControlError(400, "the body must be JSON") from None
        if not isinstance(body, dict):
            raise ControlError(400, "the body must be a JSON object")
        return body


class ControlApi:
    def __init__(
        self, state: SandboxState, poster: WebhookPoster, pages: PagesState | None = None
    ) -> None:
        self.state = state
        self.poster = poster
        self.pages = pages or PagesState()
        number = r"/_sandbox/numbers/(?P<id>[^/]+)"
        self.routes: list[tuple[str, re.Pattern[str], Callable[[Request], tuple[int, JSON]]]] = [
            ("GET", re.compile(r"/_sandbox/health"), self.health),
            ("GET", re.compile(r"/_sandbox/faults"), self.faults),
            ("POST", re.compile(r"/_sandbox/reset"), self.reset),
            ("GET", re.compile(r"/_sandbox/numbers"), self.list_numbers),
            ("POST", re.compile(r"/_sandbox/numbers"), self.register_number),
            ("GET", re.compile(number), self.get_number),
            ("PATCH", re.compile(number), self.update_number),
            ("GET", re.compile(number + "/messages"), self.list_messages),
            ("POST", re.compile(number + "/inbound"), self.post_inbound),
            ("GET", re.compile(r"/_sandbox/requests"), self.list_requests),
            ("GET", re.compile(r"/_sandbox/webhooks"), self.list_webhooks),
            *PageControl(self.pages, poster, ControlError).routes(),
        ]

    def handle(self, method: str, path: str, query: dict[str, str], raw: bytes) -> tuple[int, JSON]:
        path = path.rstrip("/")
        matched_path = False
        for route_method, pattern, handler in self.routes:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            matched_path = True
            if route_method == method:
                try:
                    return handler(Request(match.groupdict(), query, raw))
                except ControlError as exc:
                    return exc.status, exc.body
        if matched_path:
            return 405, {"error": f"{method} is not allowed on {path}"}
        return 404, {"error": f"no such endpoint: {path}"}

    def health(self, request: Request) -> tuple[int, JSON]:
        return 200, {"status": "ok"}

    def faults(self, request: Request) -> tuple[int, JSON]:
        return 200, describe_faults()

    def reset(self, request: Request) -> tuple[int, JSON]:
        self.poster.clear()
        self.state.reset()
        self.pages.reset()
        return 200, {"status": "reset"}

    def list_numbers(self, request: Request) -> tuple[int, JSON]:
        return 200, {"numbers": [s.model_dump() for s in self.state.all_settings()]}

    def register_number(self, request: Request) -> tuple[int, JSON]:
        try:
            settings = NumberSettings.model_validate(request.json())
        except ValidationError as exc:
            raise ControlError(400, "invalid number", _errors(exc)) from None
        created = self.state.register(settings)
        return (201 if created else 200), settings.model_dump()

    def get_number(self, request: Request) -> tuple[int, JSON]:
        return 200, self._settings(request.params["id"]).model_dump()

    def update_number(self, request: Request) -> tuple[int, JSON]:
        phone_number_id = request.params["id"]
        try:
            settings = self.state.update(phone_number_id, request.json())
        except ValidationError as exc:
            raise ControlError(400, "invalid change", _errors(exc)) from None
        except ValueError as exc:
            raise ControlError(400, str(exc)) from None
        if settings is None:
            raise ControlError(404, f"no number {phone_number_id}")
        return 200, settings.model_dump()

    def list_messages(self, request: Request) -> tuple[int, JSON]:
        phone_number_id = request.params["id"]
        messages = self.state.messages_of(phone_number_id)
        if messages is None:
            raise ControlError(404, f"no number {phone_number_id}")
        return 200, {"messages": messages}

    def post_inbound(self, request: Request) -> tuple[int, JSON]:
        settings = self._settings(request.params["id"])
        body = request.json()
        sender, text = body.get("from"), body.get("text")
        if not isinstance(sender, str) or not re.fullmatch(r"[0-9]{1,20}", sender):
            raise ControlError(400, "from must be the sender's number as a string of digits")
        if not isinstance(text, str) or not text:
            raise ControlError(400, "text must be a non-empty string")
        name = body.get("name", "Sandbox Customer")
        if not isinstance(name, str):
            raise ControlError(400, "name must be a string")
        wamid = new_wamid(sender)
        value = inbound_value(wamid, sender, name, text, int(time.time()))
        payload = envelope(settings, value)
        delivery = Delivery(
            phone_number_id=settings.phone_number_id,
            url=settings.webhook_url,
            app_secret=settings.app_secret,
            kind="inbound",
            bodies=[encode(payload)],
            interval=0.0,
        )
        # Posted in the background like status webhooks, so a caller that is itself the
        # webhook receiver (Ratchet's own dashboard) cannot deadlock on a single worker.
        self.poster.schedule(delivery, first_delay=0.0)
        return 202, {"id": wamid, "payload": payload}

    def list_requests(self, request: Request) -> tuple[int, JSON]:
        return 200, {"requests": self.state.request_log(request.query.get("phone_number_id"))}

    def list_webhooks(self, request: Request) -> tuple[int, JSON]:
        return 200, {"webhooks": self.state.webhook_log(request.query.get("phone_number_id"))}

    def _settings(self, phone_number_id: str) -> NumberSettings:
        settings = self.state.settings_of(phone_number_id)
        if settings is None:
            raise ControlError(404, f"no number {phone_number_id}")
        return settings


def _errors(exc: ValidationError) -> list[dict[str, JSON]]:
    return [
        {"field": ".".join(str(part) for part in error["loc"]), "message": error["msg"]}
        for error in exc.errors()
    ]
