"""Reading and parsing request bodies within a size limit, however they are framed.

`request.max_content_length` alone does not hold: for a body without a Content-Length (a
chunked one, which gunicorn passes on with `wsgi.input_terminated`), Werkzeug stops reading
at the limit and returns what it read, so an oversized body arrives silently truncated.
So the body is read here, one byte past the limit: if that byte exists, the body is too
large.
"""

from __future__ import annotations

import json
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


def parse_json(raw: bytes) -> Any:
    """`json.loads`, with every way it can refuse untrusted bytes as one `BodyError`.

    UTF-8 only (RFC 8259): `json.loads` would also take UTF-16 or UTF-32 bytes, which we
    then could not store or show as the text we received.
    """
    try:
        return json.loads(raw.decode("utf-8"))
    except RecursionError as exc:
        raise BodyError("the JSON is nested too deeply") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BodyError(str(exc)) from exc
    except ValueError as exc:
        # Python refuses to convert an integer of more than 4,300 digits (a CPU guard).
        raise BodyError("a number in it has too many digits") from exc
