"""What a request may carry into the app: ids of ASCII digits that fit PostgreSQL's BIGINT,
and no NUL anywhere (PostgreSQL refuses one in text, which would be a 500).

`str.isdigit()` is not enough: it accepts `²` and other digits `int()` refuses, and a
19-digit id past 2^63 - 1 overflows the column. Every id in a URL (`<int:...>` routes) and
every numeric parameter goes through `parse_id`.
"""

from __future__ import annotations

import re
from typing import Any

from flask import Flask, Response, request
from werkzeug.routing import BaseConverter, Map, ValidationError

from app.json_errors import json_error

MAX_ID = 2**63 - 1
_DIGITS = re.compile(r"[0-9]{1,19}")


def parse_id(raw: str | None) -> int | None:
    """A whole number 0 to 2^63 - 1 written in ASCII digits; None for anything else."""
    if raw is None or not _DIGITS.fullmatch(raw):
        return None
    value = int(raw)
    return value if value <= MAX_ID else None


class IdConverter(BaseConverter):
    """`<int:...>` in every route: ASCII digits that fit a BIGINT, else the URL matches
    nothing (a 404), where werkzeug's own would pass a 30-digit id to the database."""

    regex = r"[0-9]{1,19}"
    weight = 50

    def __init__(self, url_map: Map, *args: Any, **kwargs: Any) -> None:
        super().__init__(url_map)

    def to_python(self, value: str) -> int:
        parsed = parse_id(value)
        if parsed is None:
            raise ValidationError()
        return parsed

    def to_url(self, value: Any) -> str:
        return str(int(value))


def _nul_in() -> str | None:
    """Where a NUL is in the request ("path", or the parameter's name); None: nowhere."""
    if "\x00" in request.path:
        return "path"
    sources = [request.args]
    # The dashboard's forms; never a machine route's body, which its own view reads raw
    # (a signature covers it) and validates itself.
    if not request.path.startswith(MACHINE_PATHS) and request.mimetype in FORM_TYPES:
        sources.append(request.form)
    for values in sources:
        for key, value in values.items(multi=True):
            if "\x00" in key or "\x00" in value:
                return key.replace("\x00", "") or "parameter"
    return None


FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
MACHINE_PATHS = ("/v1/", "/webhooks/")


def init_app(app: Flask) -> None:
    """Before any blueprint is registered: the converter applies to routes added after."""
    app.url_map.converters["int"] = IdConverter

    @app.before_request
    def _refuse_nul() -> Response | None:
        where = _nul_in()
        if where is None:
            return None
        words = f"{where[:50]}: a NUL character is not allowed"
        if request.path.startswith(MACHINE_PATHS):
            # The machine routes answer in JSON, naming the parameter like their own checks.
            return json_error(400, words, field=where[:50])
        return Response(words + "\n", 400, mimetype="text/plain")
