"""An identity's default validity per lane (issue 34; docs/api.md, "Validity"): how long a
message may still be sent when its request gives neither `valid_for` nor `expires_at`.
Bounded like `valid_for`. Pure: read from what an admin typed, described for the pages.
"""

from __future__ import annotations

import re

from app.sendrequest import MAX_AHEAD_SECONDS

LANES = ("reply", "campaign")
MAX_VALIDITY = MAX_AHEAD_SECONDS  # the longest `valid_for` a request may give
NONE_WORDS = ("", "none")
UNITS = {"": 1, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
# A whole number and an optional unit: `600`, `600s`, `10m`, `10min`, `24h`, `2d`.
WRITTEN = re.compile(r"([0-9]{1,12})\s*(s|min|m|h|d)?")


class ValidityError(ValueError):
    """Not a validity an identity may have; nothing was stored."""


def check_validity(seconds: int | None) -> int | None:
    """The seconds, if a validity may be that long; None (no limit) passes."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, int):
        raise ValidityError("a validity is a whole number of seconds")
    if not 0 < seconds <= MAX_VALIDITY:
        raise ValidityError(
            f"a validity must be more than 0 and at most {describe_validity(MAX_VALIDITY)} "
            f"({MAX_VALIDITY} s), like `valid_for`"
        )
    return seconds


def parse_validity(text: str) -> int | None:
    """Seconds from `600`, `600s`, `10m`, `24h` or `2d`; None for `none` or nothing."""
    written = text.strip().lower()
    if written in NONE_WORDS:
        return None
    match = WRITTEN.fullmatch(written)
    if match is None:
        shown = text.strip()[:20]
        raise ValidityError(
            f"{shown!r} is not a validity: give seconds, or a number with s, m, h or d "
            "(`600`, `10m`, `24h`), or `none`"
        )
    return check_validity(int(match.group(1)) * UNITS[match.group(2) or ""])


def describe_validity(seconds: int | None) -> str:
    """`10 min`, `24 h`, `35 d`, `90 s`; `no limit` for None. Exact: the largest unit that
    divides it."""
    if seconds is None:
        return "no limit"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds % size == 0:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def written_validity(seconds: int | None) -> str:
    """The form's value for a stored validity: what `parse_validity` reads back."""
    if seconds is None:
        return ""
    return describe_validity(seconds).replace(" ", "")
