"""Meta's webhook bodies: the envelope, status and inbound-message values, and the signature."""

import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any

from app.sandbox.errors import status_error
from app.sandbox.state import NumberSettings

# Where each status sits in the real order of events. Timestamps follow this order even when
# the posts do not, because Meta stamps events when they happen, not when it posts them.
EVENT_RANK = {"sent": 0, "delivered": 1, "read": 2, "failed": 1}
DAY = 24 * 60 * 60


@dataclass(frozen=True)
class AcceptedSend:
    wamid: str
    wa_id: str
    accepted_at: float
    # "service" for free-form text inside the window, "utility" for templates.
    category: str
    callback_data: str | None


def encode(payload: dict[str, Any]) -> bytes:
    # Compact and ASCII-escaped: a receiver that re-serialises instead of verifying the raw
    # bytes computes a different signature, exactly as it would against Meta.
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def sign(body: bytes, app_secret: str) -> str:
    digest = hmac.new(app_secret.encode("utf-8"), body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def envelope(settings: NumberSettings, value: dict[str, Any]) -> dict[str, Any]:
    return {
        "object": "whatsapp_business_account",
        "entry": [
            {
                "id": settings.waba_id,
                "changes": [
                    {
                        "value": {
                            "messaging_product": "whatsapp",
                            "metadata": {
                                "display_phone_number": settings.display_phone_number,
                                "phone_number_id": settings.phone_number_id,
                            },
                        }
                        | value,
                        "field": "messages",
                    }
                ],
            }
        ],
    }


def status_object(
    settings: NumberSettings,
    send: AcceptedSend,
    status: str,
    failure_code: int | None,
) -> dict[str, Any]:
    delay = settings.webhook_delay_ms / 1000
    timestamp = int(send.accepted_at + EVENT_RANK[status] * delay)
    obj: dict[str, Any] = {
        "id": send.wamid,
        "status": status,
        "timestamp": str(timestamp),
        "recipient_id": send.wa_id,
    }
    if status in ("sent", "delivered"):
        conversation: dict[str, Any] = {"id": conversation_id(settings, send)}
        if status == "sent":
            conversation["expiration_timestamp"] = str(int(send.accepted_at) + DAY)
        conversation["origin"] = {"type": send.category}
        obj["conversation"] = conversation
        obj["pricing"] = pricing(send.category)
    # Echoed on sent/delivered/read only: the docs do not say Meta echoes it on failed, so a
    # client must be able to match a failure by wamid alone.
    if send.callback_data is not None and status != "failed":
        obj["biz_opaque_callback_data"] = send.callback_data
    if status == "failed":
        code = failure_code or 131026
        obj["errors"] = [status_error(code)]
    return obj


def conversation_id(settings: NumberSettings, send: AcceptedSend) -> str:
    # One conversation per business number, user and category, as Meta bills them.
    key = f"{settings.phone_number_id}:{send.wa_id}:{send.category}"
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def pricing(category: str) -> dict[str, Any]:
    free = category == "service"
    return {
        "billable": not free,
        "pricing_model": "PMP",
        "category": category,
        "type": "free_customer_service" if free else "regular",
    }


def statuses_value(statuses: list[dict[str, Any]]) -> dict[str, Any]:
    return {"statuses": statuses}


def inbound_value(wamid: str, sender: str, name: str, text: str, timestamp: int) -> dict[str, Any]:
    return {
        "contacts": [{"profile": {"name": name}, "wa_id": sender}],
        "messages": [
            {
                "from": sender,
                "id": wamid,
                "timestamp": str(timestamp),
                "type": "text",
                "text": {"body": text},
            }
        ],
    }
