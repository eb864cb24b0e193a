"""The send request of `POST /v1/messages`: validation, normalisation and its fingerprint.

Pure: what the caller sent in, what we store out. The fingerprint covers only the
caller's normalised input (never values Ratchet derives), so a retry whose `to` differs
only by a leading `+` is the same request.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

MAX_KEY_LENGTH = 255
MAX_ID = 2**63 - 1  # PostgreSQL's bigint: every id we store is at most this
NUL = "\x00"  # PostgreSQL text cannot hold it
# Used with `fullmatch`: `$` would also match before a trailing newline.
E164_DIGITS = re.compile(r"[1-9][0-9]{6,14}")
PAGE_SCOPED_ID = re.compile(r"[0-9A-Za-z_-]{1,100}")
PHONE_PROVIDERS = ("whatsapp", "twilio")
# How an ISO 8601 date and time starts. Pydantic would read text of digits alone ("0",
# "1796040000") as Unix time, which the document's `date-time` does not allow.
ISO_DATE_TIME = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ]")
TIME_WORDS = "must be an ISO 8601 date and time with its offset"
# How far ahead `send_at` may be, and the longest validity (`app/schedule.py`).
MAX_AHEAD_SECONDS = 35 * 86400


class RequestError(ValueError):
    """Bad input; `field` names what was wrong."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class Template(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=512)
    language: str = Field(min_length=1, max_length=20)
    components: list[dict[str, Any]] = Field(default_factory=list)


class SendRequest(BaseModel):
    # No stripping: the text is sent as given, and "hi " is not the same request as "hi".
    model_config = ConfigDict(extra="forbid")

    identity_id: int = Field(gt=0)
    to: str = Field(
        min_length=1,
        max_length=100,
        description="WhatsApp and Twilio: the recipient's number in E.164 (digits, `+` "
        "optional; Twilio sends it as `whatsapp:+<digits>`). Messenger: the PSID "
        "(Page-scoped id); Instagram: the IGSID, as the customer's own webhook gave it.",
    )
    text: str | None = Field(default=None, min_length=1, max_length=4096)
    template: Template | None = None
    lane: Literal["reply", "campaign"] | None = None
    # Messenger / Instagram only: a human agent's reply up to 7 days after the customer wrote.
    tag: Literal["HUMAN_AGENT"] | None = Field(
        default=None,
        description="Messenger and Instagram only: HUMAN_AGENT sends the text as MESSAGE_TAG, "
        "allowed up to 7 days after the customer's last message (a human agent's reply). "
        "Without it a text goes as RESPONSE, inside the customer's 24-hour window.",
    )
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=MAX_KEY_LENGTH)
    status_callback: str | None = Field(
        default=None,
        min_length=1,
        max_length=2000,
        description="Where this message's status callbacks go as well: a URL on the host "
        "of one of your callback endpoints, signed with that endpoint's secret.",
    )
    campaign: str | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        description="Optional: a label for a send of many (say `black-friday-2026`), shown on "
        "the dashboard, where dead letters, search, cancel and bulk requeue filter by it.",
    )
    send_at: AwareDatetime | None = Field(
        default=None,
        description="Not sent before this time: ISO 8601 with its offset (`Z` or `+02:00`), "
        "at most 35 days ahead; a time already past means now. Until then the message waits "
        "`queued` and can be canceled.",
    )
    valid_for: int | None = Field(
        default=None,
        gt=0,
        le=MAX_AHEAD_SECONDS,
        description="Seconds the message may still be sent, counted from when it is due "
        "(`send_at`, else now), at most 35 days. Not called by then, it ends `failed` with "
        "failure class `expired`; never sent late. Give this or `expires_at`, not both. "
        "Give neither (or null) and the identity's default validity for the message's lane "
        "applies, if it has one; given, this wins over that default, longer or shorter.",
    )
    expires_at: AwareDatetime | None = Field(
        default=None,
        description="Never sent after this time (ISO 8601 with its offset, at most 35 days "
        "after it is due, and after `send_at`): then `failed` with failure class `expired`. "
        "Like `valid_for`, it wins over the identity's default validity for the lane.",
    )

    @field_validator("identity_id", "valid_for", mode="before")
    @classmethod
    def _no_bool_or_text_ids(cls, value: Any, info: ValidationInfo) -> Any:
        # A JSON null `valid_for` is one not given, as for the other optional fields.
        if value is None and info.field_name == "valid_for":
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError("must be a whole number")
        return value

    @field_validator("send_at", "expires_at", mode="before")
    @classmethod
    def _text_times_only(cls, value: Any) -> Any:
        # Pydantic would read a bare number as Unix time; the API takes ISO 8601 text.
        return iso_text(value)

    @field_validator("send_at", "expires_at")
    @classmethod
    def _in_range(cls, value: datetime | None) -> datetime | None:
        # Year 1 at +14:00 is before year 1 in UTC: no comparison or fingerprint could use it.
        if value is None:
            return None
        try:
            return value.astimezone(UTC)
        except OverflowError:
            raise ValueError("is out of range") from None

    @field_validator("text", "idempotency_key", "status_callback", "campaign")
    @classmethod
    def _no_nul(cls, value: str | None) -> str | None:
        if value is not None and NUL in value:
            raise ValueError("must not contain NUL characters")
        return value

    @field_validator("template")
    @classmethod
    def _no_nul_in_template(cls, value: Template | None) -> Template | None:
        # No provider takes one, and a PostgreSQL text column cannot hold one.
        if value is not None and _holds_nul(value.model_dump()):
            raise ValueError("must not contain NUL characters")
        return value


def iso_text(value: Any) -> Any:
    """`value` if it is None, a `datetime` (our own callers' filters), or text that starts
    as an ISO 8601 date and time does; a number, or text of digits (Unix time to
    Pydantic), is a `ValueError`."""
    if isinstance(value, datetime):
        return value
    if value is not None and not (isinstance(value, str) and ISO_DATE_TIME.match(value)):
        raise ValueError(TIME_WORDS)
    return value


def _holds_nul(value: Any) -> bool:
    if isinstance(value, str):
        return NUL in value
    if isinstance(value, dict):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_nul(item) for item in value)
    return False


def parse_send_request(payload: Any, header_key: str | None) -> SendRequest:
    """Validate the body and merge the `Idempotency-Key` header into it."""
    if not isinstance(payload, dict):
        raise RequestError("the body must be a JSON object")
    try:
        request = SendRequest.model_validate(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or None
        message = first["msg"]
        if first["type"] == "extra_forbidden":
            message = "is not a field of this request"
        raise RequestError(f"{field}: {message}" if field else message, field) from exc
    if header_key is not None:
        if not header_key or len(header_key) > MAX_KEY_LENGTH:
            raise RequestError(
                f"the Idempotency-Key header must be 1 to {MAX_KEY_LENGTH} characters",
                "idempotency_key",
            )
        if NUL in header_key:
            raise RequestError(
                "idempotency_key: the Idempotency-Key header must not contain NUL characters",
                "idempotency_key",
            )
        if request.idempotency_key is not None and request.idempotency_key != header_key:
            raise RequestError(
                "the Idempotency-Key header and the body's idempotency_key differ; send one",
                "idempotency_key",
            )
        request = request.model_copy(update={"idempotency_key": header_key})
    if (request.text is None) == (request.template is None):
        raise RequestError("give exactly one of text and template", "text")
    return request


def normalise_recipient(provider: str, to: str) -> str:
    """E.164 digits (a leading `+` and spacing dropped) for phone providers; else a user id."""
    if provider in PHONE_PROVIDERS:
        digits = re.sub(r"[\s().-]", "", to)
        digits = digits.removeprefix("+")
        if not E164_DIGITS.fullmatch(digits):
            raise RequestError(
                f"to: {to!r} is not a phone number in E.164 form (7 to 15 digits, `+` optional)",
                "to",
            )
        return digits
    if not PAGE_SCOPED_ID.fullmatch(to):
        raise RequestError(f"to: {to!r} is not a Messenger or Instagram user id", "to")
    return to


PAGE_PROVIDERS = ("messenger", "instagram")


def page_refusal(provider: str, request: SendRequest) -> tuple[str, str] | None:
    """(field, why) when the request asks what the identity's provider cannot do: Messenger
    and Instagram take text only here; only they take a message tag."""
    if provider in PAGE_PROVIDERS and request.template is not None:
        return (
            "template",
            f"{provider} identities send text only: templates are WhatsApp's; "
            "send `text` instead. Nothing was stored",
        )
    if provider not in PAGE_PROVIDERS and request.tag is not None:
        return (
            "tag",
            f"a message tag is for Messenger and Instagram identities, not {provider}; "
            "nothing was stored",
        )
    return None


def fingerprint(request: SendRequest, recipient: str) -> str:
    """A hash of the normalised caller input; `lane` only if the caller gave it."""
    material: dict[str, Any] = {"identity_id": request.identity_id, "to": recipient}
    if request.text is not None:
        material["text"] = request.text
    else:
        assert request.template is not None
        material["template"] = request.template.model_dump()
    if request.lane is not None:
        material["lane"] = request.lane
    if request.tag is not None:
        material["tag"] = request.tag
    if request.status_callback is not None:
        material["status_callback"] = request.status_callback
    if request.campaign is not None:
        material["campaign"] = request.campaign
    # The caller's own times, to the microsecond in UTC: `Z` and `+00:00` are one request.
    if request.send_at is not None:
        material["send_at"] = request.send_at.astimezone(UTC).isoformat()
    if request.valid_for is not None:
        material["valid_for"] = request.valid_for
    if request.expires_at is not None:
        material["expires_at"] = request.expires_at.astimezone(UTC).isoformat()
    canonical = json.dumps(material, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()
