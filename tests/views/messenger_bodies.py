"""The Messenger and Instagram webhook bodies the tests post: the documented shapes in
`tests/fixtures/messenger/` with our Page's ids put in, and their signatures.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from .. import meta

FIXTURES = Path(__file__).parents[1] / "fixtures" / "messenger"
PAGE = "1067280970047460"
IG = "17841400000000001"
PSID = "1254477777772919"
SECRET = "page-app-secret"


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return data


def sign(raw: bytes, secret: str = SECRET) -> str:
    """The X-Hub-Signature-256 value Meta sends, by our Page's app secret unless told."""
    return meta.sign(raw, secret)


def ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def delivery(
    *, mids: list[str] | None, watermark: int, page_id: str = PAGE, psid: str = PSID
) -> dict[str, Any]:
    body = fixture("delivery_with_mids" if mids is not None else "delivery_watermark_only")
    entry = body["entry"][0]
    entry["id"] = page_id
    event = entry["messaging"][0]
    event["sender"]["id"], event["recipient"]["id"] = psid, page_id
    event["delivery"]["watermark"] = watermark
    if mids is not None:
        event["delivery"]["mids"] = mids
    return body
