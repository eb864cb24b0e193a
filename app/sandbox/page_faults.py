"""Page fault recipients, as data: PSIDs / IGSIDs that misbehave, like a payment
sandbox's test cards (docs/sandbox.md). `GET /_sandbox/page-faults` serves the table."""

from dataclasses import asdict, dataclass
from typing import Any, Literal

from app.sandbox.faults import Answer

Receipt = Literal["delivered", "read"]


@dataclass(frozen=True)
class PageFault:
    name: str
    description: str
    accepts: bool = True
    answer: Answer = "now"
    http_status: int = 200
    code: int | None = None
    subcode: int | None = None
    message: str = ""
    times: int | None = None  # answer the error this many times per message, then accept
    receipts: tuple[Receipt, ...] | None = None  # None: the Page's own
    delivery_mids: bool | None = None  # None: the Page's own


# PSIDs / IGSIDs that misbehave, like a payment sandbox's test cards (docs/sandbox.md).
PAGE_FAULTS: dict[str, PageFault] = {
    "7770000000000001": PageFault(
        "timeout_after_accept",
        "Accepted (recorded, receipts posted), then no answer for hang_seconds.",
        answer="hang",
    ),
    "7770000000000002": PageFault(
        "reset_after_accept",
        "Accepted (recorded, receipts posted), then the connection is reset (no answer).",
        answer="reset",
    ),
    "7770000000000003": PageFault(
        "temporary_failure_twice",
        "HTTP 500, code 1200 (temporary send failure), twice per message; then accepted.",
        accepts=False,
        http_status=500,
        code=1200,
        message="Temporary send message failure. Please try again later.",
        times=2,
    ),
    "7770000000000004": PageFault(
        "rate_limited_once",
        "HTTP 400, code 613 (calls exceeded the rate limit), once per message; then accepted.",
        accepts=False,
        http_status=400,
        code=613,
        message="Calls to this api have exceeded the rate limit.",
        times=1,
    ),
    "7770000000000005": PageFault(
        "no_matching_user",
        "HTTP 400, code 100, subcode 2018001 (no matching user found), every time.",
        accepts=False,
        http_status=400,
        code=100,
        subcode=2018001,
        message="No matching user found",
    ),
    "7770000000000006": PageFault(
        "outside_window",
        "HTTP 400, code 10, subcode 2018278 (sent outside the allowed window), every time, "
        "whatever the window says.",
        accepts=False,
        http_status=400,
        code=10,
        subcode=2018278,
        message="This message is sent outside of allowed window.",
    ),
    "7770000000000007": PageFault(
        "person_unavailable",
        "HTTP 400, code 551, subcode 1545041 (this person isn't available right now).",
        accepts=False,
        http_status=400,
        code=551,
        subcode=1545041,
        message="This person isn't available right now.",
    ),
    "7770000000000008": PageFault(
        "access_token_invalid",
        "HTTP 401, code 190, every time (even with the right token).",
        accepts=False,
        http_status=401,
        code=190,
        message="Invalid OAuth access token.",
    ),
    "7770000000000009": PageFault(
        "permission_missing",
        "HTTP 403, code 10 without a subcode (the app may not send for this Page).",
        accepts=False,
        http_status=403,
        code=10,
        message="Application does not have permission for this action",
    ),
    "7770000000000010": PageFault(
        "watermark_only",
        "Accepted; its delivery receipt has no mids, only a watermark (older clients).",
        delivery_mids=False,
    ),
    "7770000000000011": PageFault(
        "read_without_delivered", "Accepted; only a read receipt, no delivery.", receipts=("read",)
    ),
    "7770000000000012": PageFault(
        "read_before_delivered",
        "Accepted; the read receipt is posted before the delivery receipt.",
        receipts=("read", "delivered"),
    ),
    "7770000000000013": PageFault(
        "hang_then_unavailable",
        "Not accepted: no answer for hang_seconds, then HTTP 500 code 1200.",
        accepts=False,
        answer="hang",
        http_status=500,
        code=1200,
        message="Temporary send message failure. Please try again later.",
    ),
}


def describe_page_faults() -> dict[str, Any]:
    return {psid: asdict(fault) for psid, fault in PAGE_FAULTS.items()}
