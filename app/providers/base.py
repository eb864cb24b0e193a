"""The provider interface and the values that cross it.

Pure data: no I/O, no database, no queue. A provider module turns an `OutboundMessage` into
an HTTP call and the answer into a `SendResult`, and turns a webhook body into a
`WebhookBatch`; everything it learned from the provider is kept verbatim (`ProviderError`,
`raw`) so a person can read exactly what the provider said.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol


class FailureClass(StrEnum):
    """What a failed attempt means for the message (docs/design.md section 7)."""

    UNKNOWN = "unknown"  # the provider may hold the message: wait for its webhook, then retry
    RATE_LIMITED = "rate_limited"  # too fast for the number or the app: retry later
    PAIR_LIMITED = "pair_limited"  # too fast for this one recipient: retry in a few seconds
    PERMANENT = "permanent"  # this message will never go as it is
    NEEDS_HUMAN = "needs_human"  # a template problem or a code we do not know
    SENDER_BROKEN = "sender_broken"  # the sending identity is unusable: pause it
    EXHAUSTED = "exhausted"  # a retry cap was reached (decided by the worker, never by a provider)
    CANCELED = "canceled"  # a person canceled it while it was queued: never sent
    EXPIRED = "expired"  # its validity ended before it was called: never sent late

    @property
    def is_retryable(self) -> bool:
        """Another attempt of the same message may succeed without anyone changing anything."""
        return self in _RETRYABLE


_RETRYABLE = frozenset({FailureClass.UNKNOWN, FailureClass.RATE_LIMITED, FailureClass.PAIR_LIMITED})


@dataclass(frozen=True, slots=True)
class ProviderError:
    """A provider's error exactly as it gave it; `raw` is the body text (or, for a transport
    failure, the description of what went wrong on the wire)."""

    provider: str
    http_status: int | None = None
    code: int | None = None
    subcode: int | None = None
    title: str | None = None
    message: str | None = None
    details: str | None = None
    trace_id: str | None = None
    raw: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProviderError:
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        return cls(**known)


@dataclass(frozen=True, slots=True, kw_only=True)
class OutboundMessage:
    """One send: free-form text or a template, never both. Keyword-only: two of its
    strings (the key and the correlation id) must never be swapped by position."""

    recipient: str
    body_text: str | None = None
    # {"name": ..., "language": "en_US" or {"code": ...}, "components": [...]}
    template: dict[str, Any] | None = None
    provider_key: str  # stable for an intent; sent as the Idempotency-Key header
    correlation_id: str  # echoed back in status webhooks (WhatsApp biz_opaque_callback_data)
    # Messenger / Instagram only: a message tag (`HUMAN_AGENT`) sends it as MESSAGE_TAG.
    tag: str | None = None

    def __post_init__(self) -> None:
        if (self.body_text is None) == (self.template is None):
            raise ValueError("an outbound message has either body_text or template, not both")


@dataclass(frozen=True, slots=True)
class Credentials:
    """How to reach the provider as one sending identity. The token and the app secret never
    appear in a repr: these objects end up in logs and tracebacks."""

    account_id: str  # WhatsApp: the phone number id
    base_url: str  # e.g. https://graph.facebook.com/v21.0, or the sandbox's address
    token: str = field(repr=False)
    app_secret: str | None = field(default=None, repr=False)
    sender: str | None = None
    # Where the provider posts this identity's statuses, when the send names it (Twilio's
    # StatusCallback: PUBLIC_BASE_URL + /webhooks/twilio/<identity id>).
    status_callback_url: str | None = None


@dataclass(frozen=True, slots=True)
class SendResult:
    """The answer to one send attempt.

    `outcome_known` is False when the provider may hold the message although we did not
    hear so (a timeout, a reset, a 5xx without an answer): the caller must then wait for a
    webhook before sending again, and any later resend must reuse the same provider key.
    """

    provider_message_id: str | None = None
    failure: FailureClass | None = None
    error: ProviderError | None = None
    retry_after: float | None = None  # seconds, only when the provider said so
    http_status: int | None = None
    response_body: str | None = None
    outcome_known: bool = True
    # The call's own deadline (the end of its worker's lease) had passed before the request
    # started: nothing left, so nothing to count; the caller gives the message back unsent.
    not_started: bool = False

    @property
    def accepted(self) -> bool:
        return self.provider_message_id is not None


@dataclass(frozen=True, slots=True)
class StatusUpdate:
    """One status of an outbound message, from a webhook."""

    routing_id: str  # the identity the delivery names (WhatsApp: phone_number_id)
    provider_message_id: str
    status: str  # the provider's own word: sent, delivered, read, failed, ...
    provider_time: datetime  # aware, UTC
    recipient: str | None
    correlation_id: str | None
    errors: list[ProviderError] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """A customer wrote to us: it opens or extends their 24-hour window on that identity."""

    routing_id: str
    sender: str
    provider_message_id: str
    provider_time: datetime
    raw: dict[str, Any] = field(default_factory=dict)
    errors: list[ProviderError] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ReportedError:
    """An error a webhook reports outside any status (WhatsApp `value.errors`), kept verbatim."""

    routing_id: str | None
    error: ProviderError
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Watermark:
    """Messenger's `message_deliveries` / `message_reads` without `mids`: every message of
    the thread (the identity, `recipient`) sent at or before `watermark_ms` reached
    `status`. Matching it to messages is the reconciler's job (`app/repo/watermarks.py`)."""

    routing_id: str  # the Page or Instagram account id
    recipient: str  # the PSID / IGSID: the other end of the thread
    status: str  # delivered or read
    watermark_ms: int  # Meta's clock, milliseconds since the epoch
    provider_time: datetime  # aware, UTC
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class WebhookBatch:
    statuses: list[StatusUpdate] = field(default_factory=list)
    inbound: list[InboundMessage] = field(default_factory=list)
    errors: list[ReportedError] = field(default_factory=list)
    watermarks: list[Watermark] = field(default_factory=list)


class WebhookFormatError(ValueError):
    """The body is not the provider's webhook shape (answer 400; nothing to apply)."""


class Provider(Protocol):
    """One provider module: translate, talk HTTP, never touch the database or the queue."""

    name: str

    def send(
        self,
        credentials: Credentials,
        message: OutboundMessage,
        *,
        timeout: float,
        not_after: float | None = None,
    ) -> SendResult:
        """One attempt, within a total deadline of `timeout` seconds and never past
        `not_after` (a `time.monotonic()` instant). Never raises for anything the provider
        or the network does: every outcome is a `SendResult`."""
        ...

    def routing_ids(self, payload: dict[str, Any]) -> list[str]:
        """Every routing id the delivery names, deduplicated, in order of appearance."""
        ...

    def verify_signature(self, raw_body: bytes, headers: Mapping[str, str], secret: str) -> bool:
        """Constant-time check of the signature over the raw bytes as received."""
        ...

    def parse_webhook(self, payload: dict[str, Any]) -> WebhookBatch: ...

    def classify(self, http_status: int | None, code: int | None) -> FailureClass: ...
