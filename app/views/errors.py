"""JSON errors for the machine-facing URL areas (the API and the webhooks)."""

from __future__ import annotations

import logging

import psycopg
from flask import Flask, Response, request
from sqlalchemy.exc import DBAPIError
from werkzeug.exceptions import HTTPException

from app.json_errors import json_error

log = logging.getLogger(__name__)

MACHINE_PREFIXES = ("/v1/", "/webhooks/")
# A client told the database is away tries again after this long (a restart or a
# failover takes seconds); nothing of its request was kept.
DATABASE_AWAY_RETRY_SECONDS = 2


def init_app(app: Flask) -> None:
    @app.errorhandler(DBAPIError)
    def _database_away(exc: DBAPIError) -> Response:
        """The database's connection refused or cut (a restart, a failover) on the API or a
        webhook: a 503 with Retry-After that says so, not a 500 with a traceback. Every
        unit of work rolled back, so retrying the same request (the same idempotency key,
        the same delivery) is safe. Other database errors are bugs: a 500 as ever."""
        away = exc.connection_invalidated or isinstance(exc.orig, psycopg.OperationalError)
        if not (away and request.path.startswith(MACHINE_PREFIXES)):
            raise exc
        log.warning("the database is away (%s): answered 503", exc.__class__.__name__)
        response = json_error(503, "the database does not answer: try again shortly")
        response.headers["Retry-After"] = str(DATABASE_AWAY_RETRY_SECONDS)
        return response

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
