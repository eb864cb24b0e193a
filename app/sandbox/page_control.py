"""The control API's Page routes, under /_sandbox/pages (docs/sandbox.md).

Register / list / change a Page or Instagram account, list what it accepted, make a
customer write in (which opens their window and posts the inbound webhook), and make a
customer read everything so far (a read watermark, or Instagram's `messaging_seen`).
"""

import re
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from app.sandbox.page_events import (
    PageSettings,
    envelope,
    inbound_event,
    read_event,
    seen_event,
)
from app.sandbox.page_faults import describe_page_faults
from app.sandbox.pages import PagesState, new_mid
from app.sandbox.poster import Delivery, WebhookPoster
from app.sandbox.webhooks import encode

USER_ID = re.compile(r"[0-9A-Za-z_-]{1,100}")

Handler = Callable[[Any], tuple[int, Any]]


class PageControl:
    def __init__(self, pages: PagesState, poster: WebhookPoster, error: type[Exception]) -> None:
        self.pages = pages
        self.poster = poster
        self.error = error  # the control API's ControlError(status, message, details)

    def routes(self) -> list[tuple[str, re.Pattern[str], Handler]]:
        page = r"/_sandbox/pages/(?P<id>[^/]+)"
        return [
            ("GET", re.compile(r"/_sandbox/pages"), self.list_pages),
            ("POST", re.compile(r"/_sandbox/pages"), self.register_page),
            ("GET", re.compile(r"/_sandbox/page-faults"), self.faults),
            ("GET", re.compile(page), self.get_page),
            ("PATCH", re.compile(page), self.update_page),
            ("GET", re.compile(page + "/messages"), self.list_messages),
            ("POST", re.compile(page + "/inbound"), self.post_inbound),
            ("POST", re.compile(page + "/read"), self.post_read),
        ]

    def faults(self, request: Any) -> tuple[int, Any]:
        return 200, {"recipients": describe_page_faults()}

    def list_pages(self, request: Any) -> tuple[int, Any]:
        with self.pages.lock:
            return 200, {"pages": [p.settings.model_dump() for p in self.pages.pages.values()]}

    def register_page(self, request: Any) -> tuple[int, Any]:
        try:
            settings = PageSettings.model_validate(request.json())
        except ValidationError as exc:
            raise self.error(400, "invalid page", _errors(exc)) from None
        created = self.pages.register(settings)
        return (201 if created else 200), settings.model_dump()

    def get_page(self, request: Any) -> tuple[int, Any]:
        return 200, self._page(request.params["id"]).settings.model_dump()

    def update_page(self, request: Any) -> tuple[int, Any]:
        page_id = request.params["id"]
        try:
            settings = self.pages.update(page_id, request.json())
        except ValidationError as exc:
            raise self.error(400, "invalid change", _errors(exc)) from None
        except ValueError as exc:
            raise self.error(400, str(exc)) from None
        if settings is None:
            raise self.error(404, f"no page {page_id}")
        return 200, settings.model_dump()

    def list_messages(self, request: Any) -> tuple[int, Any]:
        page = self._page(request.params["id"])
        with self.pages.lock:
            return 200, {"messages": list(page.messages)}

    def post_inbound(self, request: Any) -> tuple[int, Any]:
        """`{"from": "<PSID/IGSID>", "text": "..."}`: the customer writes to the Page."""
        page = self._page(request.params["id"])
        body = request.json()
        customer, text = body.get("from"), body.get("text")
        if not isinstance(customer, str) or not USER_ID.fullmatch(customer):
            raise self.error(400, "from must be the customer's PSID / IGSID (letters, digits)")
        if not isinstance(text, str) or not text:
            raise self.error(400, "text must be a non-empty string")
        with self.pages.lock:
            at = page.now_ms()
            page.last_inbound_ms[customer] = max(page.last_inbound_ms.get(customer, 0), at)
            settings = page.settings
        mid = new_mid()
        payload = envelope(settings, [inbound_event(settings, customer, mid, text, at)], at)
        self._post(settings, "inbound", payload)
        return 202, {"id": mid, "payload": payload}

    def post_read(self, request: Any) -> tuple[int, Any]:
        """`{"from": "<PSID/IGSID>"}`: the customer reads every message so far."""
        page = self._page(request.params["id"])
        customer = request.json().get("from")
        if not isinstance(customer, str) or not USER_ID.fullmatch(customer):
            raise self.error(400, "from must be the customer's PSID / IGSID (letters, digits)")
        with self.pages.lock:
            at = page.now_ms()
            settings = page.settings
            theirs = [m for m in page.messages if m["to"] == customer]
        if settings.platform == "instagram":
            if not theirs:
                raise self.error(409, f"nothing was sent to {customer} to be seen")
            event = seen_event(settings, customer, theirs[-1]["mid"], at)
        else:
            event = read_event(settings, customer, at)
        payload = envelope(settings, [event], at)
        self._post(settings, "receipts", payload)
        return 202, {"payload": payload}

    def _post(self, settings: PageSettings, kind: str, payload: dict[str, Any]) -> None:
        delivery = Delivery(
            phone_number_id=settings.page_id,
            url=settings.webhook_url,
            app_secret=settings.app_secret,
            kind=kind,
            bodies=[encode(payload)],
            interval=0.0,
        )
        # Posted in the background, as every webhook: a caller that is itself the receiver
        # cannot deadlock on a single worker.
        self.poster.schedule(delivery, first_delay=0.0)

    def _page(self, page_id: str) -> Any:
        page = self.pages.get(page_id)
        if page is None:
            raise self.error(404, f"no page {page_id}")
        return page


def _errors(exc: ValidationError) -> list[dict[str, Any]]:
    return [
        {"field": ".".join(str(part) for part in error["loc"]), "message": error["msg"]}
        for error in exc.errors()
    ]
