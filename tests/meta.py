"""Meta webhook bodies for tests, from the fixtures transcribed from Meta's documentation."""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
from datetime import datetime
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures" / "whatsapp"
PHONE_NUMBER_ID = "106540352242922"


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


def status_body(
    statuses: list[dict[str, Any]], phone_number_id: str = PHONE_NUMBER_ID
) -> dict[str, Any]:
    """One delivery carrying `statuses`, in Meta's envelope."""
    body = fixture("status_sent")
    value = body["entry"][0]["changes"][0]["value"]
    value["metadata"]["phone_number_id"] = phone_number_id
    value["statuses"] = statuses
    return body


def status(
    wamid: str,
    word: str,
    at: datetime,
    *,
    correlation_id: str | None = None,
    recipient: str = "15551234567",
) -> dict[str, Any]:
    """A status object shaped like the fixture of that status."""
    name = f"status_{word}" if word in ("sent", "delivered", "read", "failed") else "status_sent"
    template = fixture(name)["entry"][0]["changes"][0]["value"]["statuses"][0]
    obj = copy.deepcopy(template)
    obj.update(id=wamid, status=word, timestamp=str(int(at.timestamp())), recipient_id=recipient)
    obj.pop("biz_opaque_callback_data", None)
    if correlation_id is not None:
        obj["biz_opaque_callback_data"] = correlation_id
    return obj


def sign(raw: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()


def encode(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


BUSINESS_ACCOUNT_ID = "102290129340398"  # the WABA of the account-level fixtures


def account_body(name: str, account: str = BUSINESS_ACCOUNT_ID, **value: Any) -> dict[str, Any]:
    """An account-level fixture under `account`, with `value` fields replaced."""
    body = fixture(name)
    body["entry"][0]["id"] = account
    body["entry"][0]["changes"][0]["value"].update(value)
    return body
