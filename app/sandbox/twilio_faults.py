"""The sandbox's Twilio faults, as data: magic recipients and Twilio's error texts.

``GET /_sandbox/twilio/faults`` serves the recipient table; docs/sandbox.md documents it.
"""

from dataclasses import dataclass
from typing import Literal

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
