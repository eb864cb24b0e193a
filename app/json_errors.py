"""The JSON error body the machine-facing URL areas (the API and the webhooks) answer with.

Below the views: the request checks in `app/inputs.py` answer with it too, before any view
runs.
"""

from __future__ import annotations

from flask import Response, jsonify


def json_error(status: int, message: str, **extra: object) -> Response:
    response = jsonify(error=message, **extra)
    response.status_code = status
    return response
