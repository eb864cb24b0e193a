"""Fault injection, as data: magic recipients (like a payment sandbox's test cards) and rates.

The recipient table is the single source of truth: docs/sandbox.md documents it and
``GET /_sandbox/faults`` serves it, so tests and the demo can look up what a number does.
"""

import random
from dataclasses import asdict, dataclass
from typing import Any, Literal

Answer = Literal["now", "hang", "reset"]


@dataclass(frozen=True)
class Fault:
    name: str
    description: str
    # Accepted sends are recorded and get webhooks even if the client never sees the answer.
    accepts: bool = True
    # "hang": answer only after the number's hang_seconds; "reset": RST instead of an answer.
    answer: Answer = "now"
    error_code: int | None = None
    # Answer the error this many times per message (per Idempotency-Key, else per body),
    # then accept normally; None means every time.
    times: int | None = None
    retry_after: str | None = None
    # Status webhooks in the order they are posted; None means the number's own list.
    statuses: tuple[str, ...] | None = None
    failure_code: int | None = None


RECIPIENT_FAULTS: dict[str, Fault] = {
    "15550000001": Fault(
        "timeout_after_accept",
        "Accepted (recorded, webhooks posted), then no answer for hang_seconds; "
        "the success answer comes late, after most clients have timed out.",
        answer="hang",
    ),
    "15550000002": Fault(
        "reset_after_accept",
        "Accepted (recorded, webhooks posted), then the connection is reset (RST, no answer).",
        answer="reset",
    ),
    "15550000003": Fault(
        "unavailable_twice",
        "HTTP 503, code 131016, twice per message; the third attempt is accepted.",
        accepts=False,
        error_code=131016,
        times=2,
    ),
    "15550000004": Fault(
        "rate_limited_once",
        "HTTP 429, code 130429, with Retry-After: 2, once per message; then accepted.",
        accepts=False,
        error_code=130429,
        times=1,
        retry_after="2",
    ),
    "15550000005": Fault(
        "undeliverable", "HTTP 400, code 131026, every time.", accepts=False, error_code=131026
    ),
    "15550000006": Fault(
        "outside_24h_window",
        "HTTP 400, code 131047 (re-engagement), every time.",
        accepts=False,
        error_code=131047,
    ),
    "15550000007": Fault(
        "template_does_not_exist",
        "HTTP 400, code 132001, every time.",
        accepts=False,
        error_code=132001,
    ),
    "15550000008": Fault(
        "template_paused", "HTTP 400, code 132015, every time.", accepts=False, error_code=132015
    ),
    "15550000009": Fault(
        "access_token_invalid",
        "HTTP 401, code 190, every time (even with the right token).",
        accepts=False,
        error_code=190,
    ),
    "15550000010": Fault(
        "fails_after_sent",
        "Accepted; webhooks: sent, then failed with errors[] code 131049.",
        statuses=("sent", "failed"),
        failure_code=131049,
    ),
    "15550000011": Fault(
        "out_of_order",
        "Accepted; webhooks posted in the order delivered, sent, read.",
        statuses=("delivered", "sent", "read"),
    ),
    "15550000012": Fault(
        "read_without_delivered",
        "Accepted; webhooks: sent then read, no delivered (Meta's documented optimisation).",
        statuses=("sent", "read"),
    ),
    "15550000013": Fault(
        "hang_then_unavailable",
        "Not accepted (nothing recorded, no webhook): no answer for hang_seconds, then "
        "HTTP 503 code 131016.",
        accepts=False,
        answer="hang",
        error_code=131016,
    ),
}

# Faults drawn at random per send when a number sets fault_rates (for load tests).
RATE_FAULTS: dict[str, Fault] = {
    "timeout": RECIPIENT_FAULTS["15550000001"],
    "reset": RECIPIENT_FAULTS["15550000002"],
    "hang": RECIPIENT_FAULTS["15550000013"],
    "server_error": Fault(
        "server_error", "HTTP 500, code 131000, not accepted.", accepts=False, error_code=131000
    ),
    "rate_limited": Fault(
        "rate_limited",
        "HTTP 429, code 130429, no Retry-After (as the real API), not accepted.",
        accepts=False,
        error_code=130429,
    ),
}


def recipient_digits(to: str) -> str:
    return "".join(ch for ch in to if ch.isdigit())


def fault_for_recipient(to: str) -> Fault | None:
    return RECIPIENT_FAULTS.get(recipient_digits(to))


def draw_rate_fault(rates: dict[str, float], rng: random.Random) -> Fault | None:
    """One uniform draw against the cumulative rates, in a fixed order so seeds replay."""
    roll = rng.random()
    cumulative = 0.0
    for name in sorted(rates):
        cumulative += rates[name]
        if roll < cumulative:
            return RATE_FAULTS[name]
    return None


def describe_faults() -> dict[str, Any]:
    return {
        "recipients": {to: asdict(fault) for to, fault in RECIPIENT_FAULTS.items()},
        "rates": {name: asdict(fault) for name, fault in RATE_FAULTS.items()},
    }
