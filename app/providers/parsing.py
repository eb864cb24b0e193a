"""Reading the fields of a provider's webhook or answer: one behaviour for every provider.

A webhook's JSON is outside input. These helpers either give the field in the type the
caller asked for, or raise `WebhookFormatError` with the field's path in the payload
(`entry[0].changes[1].value.statuses is not a list`): that text is what a webhook's
answer names when a delivery is not understood, so a person can find the bad field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .base import WebhookFormatError


def header(headers: Mapping[str, str], name: str) -> str | None:
    """A header's value by its name in any case, from any mapping (a plain dict or the
    framework's headers); None when absent."""
    direct = headers.get(name)
    if direct is not None:
        return direct
    wanted = name.lower()
    for key, value in headers.items():
        if key.lower() == wanted:
            return value
    return None


def object_at(value: Any, path: str) -> dict[str, Any]:
    """`value` itself, which must be a JSON object."""
    if not isinstance(value, dict):
        raise WebhookFormatError(f"{path} is not an object")
    return value


def list_at(container: Mapping[str, Any], key: str, path: str) -> list[Any]:
    """`container[key]` as a list: absent or null is the empty list, anything else that
    is not a list is an error."""
    value = container.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise WebhookFormatError(f"{path}.{key} is not a list")
    return value


def required_str(raw: Mapping[str, Any], key: str, path: str) -> str:
    """`raw[key]` as an identifier: a non-empty string, or a whole number (ids that
    arrive as JSON numbers). Absent, empty, a boolean, a fraction, an object or a list is
    the same error: the field is missing."""
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
        raise WebhookFormatError(f"{path}.{key} missing")
    return str(value)


def str_or_none(value: Any) -> str | None:
    """A scalar as text (numbers as written by `str`); None for null, an object or a
    list."""
    if value is None or isinstance(value, (dict, list)):
        return None
    return str(value)


def int_or_none(value: Any) -> int | None:
    """An int from a number (a fraction cut to its whole part) or from the text of a
    whole number; None for anything else, a boolean included (Python counts it as one)."""
    if isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: int(float("inf"))
        return None


def json_or_none(text: str) -> Any:
    """The JSON document in `text`, or None when it is not JSON (an HTML error page)."""
    try:
        return json.loads(text)
    except ValueError:
        return None
