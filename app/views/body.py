"""Reading and parsing request bodies within a size limit, however they are framed.

`request.max_content_length` alone does not hold: for a body without a Content-Length (a
chunked one, which gunicorn passes on with `wsgi.input_terminated`), Werkzeug stops reading
at the limit and returns what it read, so an oversized body arrives silently truncated.
So the body is read here, one byte past the limit: if that byte exists, the body is too
large.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from flask import request
from werkzeug.exceptions import RequestEntityTooLarge


class BodyError(ValueError):
    """The body is not JSON we can read (answer 400)."""


def read_body(limit: int) -> bytes:
    """The whole body, or `RequestEntityTooLarge` (413) if it is over `limit` bytes."""
    # One byte of slack: a declared Content-Length over the limit is refused before any
    # read, and a stream is cut one byte past it, so `limit + 1` bytes read means too large.
    request.max_content_length = limit + 1
    stream = request.stream
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = stream.read(limit + 1 - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > limit:
        raise RequestEntityTooLarge()
    return b"".join(chunks)


def _no_constant(name: str) -> Any:
    raise BodyError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise BodyError(f"the number {text[:20]} is too large")
    return value


# `\uD800` to `\uDFFF` in any case: the only way a surrogate gets into parsed JSON (UTF-8
# bytes of one are refused when decoded). A pair (an emoji) matches too, and is then checked.
_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


def parse_json(raw: bytes) -> Any:
    """`json.loads`, with every way it can refuse untrusted bytes as one `BodyError`.

    UTF-8 only (RFC 8259): `json.loads` would also take UTF-16 or UTF-32 bytes, which we
    then could not store or show as the text we received. Python's parser also takes what
    JSON does not have, and what the database then refuses: NaN and Infinity, numbers too
    large for a float, and lone surrogates escaped as `\\ud800` (text no encoding can hold).
    """
    try:
        value = json.loads(raw.decode("utf-8"), parse_constant=_no_constant, parse_float=_finite)
        # A lone surrogate survives parsing as a str that cannot be encoded again. Looked
        # for only where one may be: encoding every delivery again cost 2 to 4% of a
        # webhook's CPU.
        if _ESCAPED_SURROGATE.search(raw):
            json.dumps(value, ensure_ascii=False).encode("utf-8")
    except RecursionError as exc:
        raise BodyError("the JSON is nested too deeply") from exc
    except UnicodeEncodeError as exc:
        raise BodyError("the JSON holds text that is not valid Unicode (a lone surrogate)") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BodyError(str(exc)) from exc
    except BodyError:
        raise
    except ValueError as exc:
        # Python refuses to convert an integer of more than 4,300 digits (a CPU guard).
        raise BodyError("a number in it has too many digits") from exc
    return value


# What of a webhook's headers is kept with its raw body: what a person reading it or a
# replay needs (the signature, the body's type, the sender's user agent, the provider's
# own delivery ids), never what a proxy or a stray client added (Cookie, Authorization).
KEPT_HEADERS = frozenset(
    {
        "content-type",
        "user-agent",
        "x-hub-signature-256",  # Meta
        "x-hub-signature",  # Meta's older SHA-1 signature
        "x-twilio-signature",
        "i-twilio-idempotency-token",  # Twilio's id of this delivery, the same on a retry
    }
)
# Meta's own ids of a delivery or its request, whatever their names.
KEPT_PREFIXES = ("x-fb-", "x-meta-")


def kept_headers(headers: Any) -> dict[str, str]:
    """The request's headers worth storing with a webhook (see KEPT_HEADERS)."""
    return {
        name: value
        for name, value in headers.items()
        if name.lower() in KEPT_HEADERS or name.lower().startswith(KEPT_PREFIXES)
    }
