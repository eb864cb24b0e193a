"""JSON errors for the machine-facing URL areas (the API and the webhooks)."""

from __future__ import annotations

from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from app.json_errors import json_error

MACHINE_PREFIXES = ("/v1/", "/webhooks/")


def init_app(app: Flask) -> None:
    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Response | HTTPException:
        if not request.path.startswith(MACHINE_PREFIXES):
            return exc
        messages = {
            404: "not found",
            405: f"method {request.method} is not allowed here",
            413: "the request body is too large",
        }
        message = messages.get(exc.code or 500, exc.description or exc.name)
        response = json_error(exc.code or 500, message)
        if exc.code == 405 and exc.response is None:
            allowed = getattr(exc, "valid_methods", None)
            if allowed:
                response.headers["Allow"] = ", ".join(allowed)
        return response
