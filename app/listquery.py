"""The query of `GET /v1/messages`: its filters, validated, and its opaque cursor.

Pure, like `app/sendrequest.py`: the query string in, `ListQuery` out, or a `RequestError`
naming the parameter. An unknown parameter is refused rather than ignored: a typo such as
`?stauts=failed` would otherwise list everything and look like an answer.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    field_validator,
)

from app.providers.base import FailureClass
from app.sendrequest import MAX_ID, NUL, RequestError, iso_text

DEFAULT_LIMIT = 50
MAX_LIMIT = 100
_CURSOR = re.compile(r"m([1-9][0-9]{0,18})")
# A recipient as stored: E.164 digits, or a Page-scoped id; `+`, spaces and dashes are
# dropped from a phone number as the send request drops them.
_RECIPIENT = re.compile(r"[0-9A-Za-z_-]{1,100}")
# The document lists the classes; the validator below keeps its own clearer message.
_CLASS_SCHEMA = WithJsonSchema({"type": "string", "enum": [c.value for c in FailureClass]})


class ListQuery(BaseModel):
    """The filters, all optional and combined with AND; newest first, `limit` a page."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: Literal["queued", "sending", "sent", "delivered", "read", "failed"] | None = Field(
        default=None, description="the message's state now"
    )
    failure_class: Annotated[str, _CLASS_SCHEMA] | None = Field(
        default=None, description="a failed message's class (`canceled`, `permanent`, ...)"
    )
    identity_id: int | None = Field(default=None, gt=0, le=MAX_ID)
    lane: Literal["reply", "campaign"] | None = None
    to: str | None = Field(
        default=None,
        description="the recipient as the message shows it: E.164 digits (a leading `+` "
        "is dropped), or the PSID / IGSID",
    )
    created_since: datetime | None = Field(
        default=None, description="created at or after this instant (ISO 8601, with offset)"
    )
    updated_since: datetime | None = Field(
        default=None,
        description="with a change Ratchet received at or after this instant (a state "
        "move, an attempt, a webhook status, a cancel or requeue)",
    )
    limit: int = Field(default=DEFAULT_LIMIT, ge=1, le=MAX_LIMIT)
    cursor: str | None = Field(
        default=None, description="`next_cursor` of the page before; omit for the first page"
    )

    @field_validator("failure_class")
    @classmethod
    def _known_class(cls, value: str | None) -> str | None:
        if value is not None and value not in {member.value for member in FailureClass}:
            known = ", ".join(member.value for member in FailureClass)
            raise ValueError(f"must be one of {known}")
        return value

    @field_validator("to")
    @classmethod
    def _recipient(cls, value: str | None) -> str | None:
        if value is None:
            return None
        cleaned = re.sub(r"[\s().]", "", value).removeprefix("+")
        if not _RECIPIENT.fullmatch(cleaned):
            raise ValueError("is not a phone number or a Messenger / Instagram user id")
        return cleaned

    @field_validator("created_since", "updated_since", mode="before")
    @classmethod
    def _iso_text(cls, value: object) -> object:
        return iso_text(value)

    @field_validator("created_since", "updated_since")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("must carry its offset (`Z` or `+00:00`)")
        return value.astimezone(UTC) if value is not None else None

    @property
    def before_id(self) -> int | None:
        """The id the page continues below, from the cursor (checked when parsed)."""
        return decode_cursor(self.cursor) if self.cursor is not None else None


def encode_cursor(last_id: int) -> str:
    return base64.urlsafe_b64encode(f"m{last_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise RequestError("cursor: not a cursor this API gave", "cursor") from exc
    match = _CURSOR.fullmatch(raw)
    if match is None or int(match.group(1)) > MAX_ID:
        raise RequestError("cursor: not a cursor this API gave", "cursor")
    return int(match.group(1))


def parse_list_query(args: Mapping[str, list[str]]) -> ListQuery:
    """Each parameter once; unknown ones, repeats and bad values are a `RequestError`."""
    values: dict[str, str] = {}
    for name, given in args.items():
        if name not in ListQuery.model_fields:
            known = ", ".join(ListQuery.model_fields)
            raise RequestError(f"{name}: is not a filter of this list (known: {known})", name)
        if len(given) != 1:
            raise RequestError(f"{name}: give it once", name)
        if NUL in given[0]:
            raise RequestError(f"{name}: must not contain NUL characters", name)
        values[name] = given[0]
    try:
        query = ListQuery.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or None
        raise RequestError(f"{field}: {first['msg']}", field) from exc
    if query.cursor is not None:
        decode_cursor(query.cursor)
    return query
