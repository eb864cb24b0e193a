"""A sandbox Page's settings (the control API's body) and the webhook events its customer's
phone causes (echoes, deliveries, reads, Instagram's seen, an inbound message), shaped as
Meta's Messenger Platform documents them. `pages.py` sends; this says what is posted."""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.sandbox.page_faults import Receipt

DEFAULT_RECEIPTS: tuple[Receipt, ...] = ("delivered", "read")


class PageSettings(BaseModel):
    """A registered Page or Instagram account and how it behaves (the control API's body)."""

    model_config = ConfigDict(extra="forbid")

    page_id: str = Field(min_length=1, pattern=r"^[0-9A-Za-z_-]+$")
    platform: Literal["messenger", "instagram"] = "messenger"
    token: str = Field(min_length=1)
    app_secret: str = Field(min_length=1)
    webhook_url: str = Field(pattern=r"^https?://")
    honour_idempotency_keys: bool = False
    # Receipts the customer's phone sends for each accepted message, in the real order of
    # events. Instagram has no delivery receipt: its `delivered` entries are skipped.
    receipts: list[Receipt] = Field(default_factory=lambda: list(DEFAULT_RECEIPTS))
    # Messenger deliveries carry `mids` unless this is False (then only a watermark).
    delivery_mids: bool = True
    # Post the echo of every accepted message (message_echoes; on Instagram, `messages`
    # with is_echo), carrying the send's `message.metadata` back.
    echoes: bool = True
    app_id: str = Field(default="1517776481860111", pattern=r"^[0-9]{1,20}$")
    webhook_delay_ms: int = Field(default=0, ge=0)
    duplicate_webhooks: bool = False
    shuffle_webhooks: bool = False
    batch_webhooks: bool = False
    # Added to the sandbox's clock for every time it stamps (a test's clock, moved on).
    clock_offset_ms: int = 0
    rate_limit_mps: int | None = Field(default=80, ge=1)
    hang_seconds: float = Field(default=30.0, ge=0)
    seed: int | None = None


def envelope(settings: PageSettings, events: list[dict[str, Any]], at_ms: int) -> dict[str, Any]:
    return {
        "object": "page" if settings.platform == "messenger" else "instagram",
        "entry": [{"id": settings.page_id, "time": at_ms, "messaging": events}],
    }


def echo_event(
    settings: PageSettings, customer: str, mid: str, message: dict[str, Any], at: int
) -> dict[str, Any]:
    echoed: dict[str, Any] = {"is_echo": True, "app_id": int(settings.app_id)}
    if "metadata" in message:
        echoed["metadata"] = message["metadata"]
    echoed |= {"mid": mid, "text": message["text"]}
    return {
        "sender": {"id": settings.page_id},
        "recipient": {"id": customer},
        "timestamp": at,
        "message": echoed,
    }


def delivery_event(
    settings: PageSettings, customer: str, mids: list[str] | None, watermark: int
) -> dict[str, Any]:
    delivery: dict[str, Any] = {"watermark": watermark}
    if mids is not None:
        delivery = {"mids": mids, "watermark": watermark}
    # The documented example carries no `timestamp` on deliveries.
    return {"sender": {"id": customer}, "recipient": {"id": settings.page_id}, "delivery": delivery}


def read_event(settings: PageSettings, customer: str, watermark: int) -> dict[str, Any]:
    return {
        "sender": {"id": customer},
        "recipient": {"id": settings.page_id},
        "timestamp": watermark + 5,
        "read": {"watermark": watermark},
    }


def seen_event(settings: PageSettings, customer: str, mid: str, at: int) -> dict[str, Any]:
    return {
        "sender": {"id": customer},
        "recipient": {"id": settings.page_id},
        "timestamp": at,
        "read": {"mid": mid},
    }


def inbound_event(
    settings: PageSettings, customer: str, mid: str, text: str, at: int
) -> dict[str, Any]:
    return {
        "sender": {"id": customer},
        "recipient": {"id": settings.page_id},
        "timestamp": at,
        "message": {"mid": mid, "text": text},
    }
