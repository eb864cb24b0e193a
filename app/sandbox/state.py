"""What the sandbox remembers: numbers, accepted sends, the request and webhook logs.

One lock guards everything. Handlers decide a send's fate inside it (idempotency check and
record must be atomic, or two racing retries would both be accepted) and do their I/O
(answering, sleeping, posting webhooks) outside it.
"""

import random
import secrets
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from app.sandbox.faults import RATE_FAULTS

StatusName = Literal["sent", "delivered", "read", "failed"]
DEFAULT_STATUSES: tuple[StatusName, ...] = ("sent", "delivered", "read")


def new_waba_id() -> str:
    return str(100_000_000_000_000 + secrets.randbelow(900_000_000_000_000))


class NumberSettings(BaseModel):
    """A registered business phone number and how it behaves (the control API's body)."""

    model_config = ConfigDict(extra="forbid")

    phone_number_id: str = Field(min_length=1, pattern=r"^[0-9A-Za-z_-]+$")
    token: str = Field(min_length=1)
    app_secret: str = Field(min_length=1)
    webhook_url: str = Field(pattern=r"^https?://")
    waba_id: str = Field(default_factory=new_waba_id)
    display_phone_number: str = "15550100000"
    honour_idempotency_keys: bool = False
    webhook_delay_ms: int = Field(default=0, ge=0)
    # Every answer to a send waits this long (the network and the provider's own time).
    answer_delay_ms: int = Field(default=0, ge=0, le=60_000)
    duplicate_webhooks: bool = False
    shuffle_webhooks: bool = False
    batch_webhooks: bool = False
    statuses: list[StatusName] = Field(default_factory=lambda: list(DEFAULT_STATUSES))
    rate_limit_mps: int | None = Field(default=80, ge=1)
    # A send to a recipient accepted less than this long after the last one to them: 131056.
    pair_limit_seconds: float | None = Field(default=None, gt=0)
    fault_rates: dict[str, float] = Field(default_factory=dict)
    seed: int | None = None
    hang_seconds: float = Field(default=30.0, ge=0)

    @field_validator("fault_rates")
    @classmethod
    def check_fault_rates(cls, rates: dict[str, float]) -> dict[str, float]:
        unknown = set(rates) - set(RATE_FAULTS)
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; known: {sorted(RATE_FAULTS)}")
        if any(not 0 <= rate <= 1 for rate in rates.values()):
            raise ValueError("each fault rate must be between 0 and 1")
        return rates

    @model_validator(mode="after")
    def check_total_rate(self) -> "NumberSettings":
        if sum(self.fault_rates.values()) > 1:
            raise ValueError("fault rates must add up to at most 1")
        return self


@dataclass
class Number:
    settings: NumberSettings
    rng: random.Random
    # Admission times within the last second, for the sliding-window rate limit.
    admitted: deque[float] = field(default_factory=deque)
    # Errors answered so far per message, for faults that fail n times then accept.
    fault_counts: dict[str, int] = field(default_factory=dict)
    # Idempotency-Key -> the original success answer (only when keys are honoured).
    answers_by_key: dict[str, dict[str, Any]] = field(default_factory=dict)
    messages: list[dict[str, Any]] = field(default_factory=list)
    # The time of the last send accepted for each recipient (wa_id), for the pair limit.
    last_accepted_to: dict[str, float] = field(default_factory=dict)

    def is_rate_limited(self, now: float) -> bool:
        """Admit the request unless the last second already holds rate_limit_mps of them."""
        limit = self.settings.rate_limit_mps
        while self.admitted and self.admitted[0] <= now - 1.0:
            self.admitted.popleft()
        if limit is not None and len(self.admitted) >= limit:
            return True
        self.admitted.append(now)
        return False


class SandboxState:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.numbers: dict[str, Number] = {}
        self.requests: list[dict[str, Any]] = []
        self.webhooks: list[dict[str, Any]] = []

    def register(self, settings: NumberSettings) -> bool:
        """Add or replace a number; True if it is new. Records of a replaced number stay."""
        with self.lock:
            existing = self.numbers.get(settings.phone_number_id)
            if existing is None:
                self.numbers[settings.phone_number_id] = Number(
                    settings, random.Random(settings.seed)
                )
                return True
            self._apply(existing, settings)
            return False

    def update(self, phone_number_id: str, changes: dict[str, Any]) -> NumberSettings | None:
        """Validate the merged settings (raises pydantic.ValidationError); None if unknown."""
        with self.lock:
            number = self.numbers.get(phone_number_id)
            if number is None:
                return None
            merged = number.settings.model_dump() | changes
            settings = NumberSettings.model_validate(merged)
            if settings.phone_number_id != phone_number_id:
                raise ValueError("phone_number_id cannot change")
            self._apply(number, settings)
            return settings

    @staticmethod
    def _apply(number: Number, settings: NumberSettings) -> None:
        if settings.seed != number.settings.seed:
            number.rng = random.Random(settings.seed)
        number.settings = settings

    def settings_of(self, phone_number_id: str) -> NumberSettings | None:
        with self.lock:
            number = self.numbers.get(phone_number_id)
            return None if number is None else number.settings

    def all_settings(self) -> list[NumberSettings]:
        with self.lock:
            return [number.settings for number in self.numbers.values()]

    def messages_of(self, phone_number_id: str) -> list[dict[str, Any]] | None:
        with self.lock:
            number = self.numbers.get(phone_number_id)
            return None if number is None else list(number.messages)

    def log_request(self, entry: dict[str, Any]) -> None:
        with self.lock:
            self.requests.append(entry)

    def log_webhook(self, entry: dict[str, Any]) -> None:
        with self.lock:
            self.webhooks.append(entry)

    def request_log(self, phone_number_id: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            if phone_number_id is None:
                return list(self.requests)
            return [r for r in self.requests if r["phone_number_id"] == phone_number_id]

    def webhook_log(self, phone_number_id: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            if phone_number_id is None:
                return list(self.webhooks)
            return [w for w in self.webhooks if w["phone_number_id"] == phone_number_id]

    def reset(self) -> None:
        with self.lock:
            self.numbers.clear()
            self.requests.clear()
            self.webhooks.clear()
