"""`GET /metrics`: Prometheus's text format, for a scraper (internal, like /readyz).

Behind the bearer token `RATCHET_METRICS_TOKEN`: a missing or wrong token gets a 401 and no
figures. Without the setting it is closed (403): the figures name every tenant, identity,
queue depth and firing alert, and the port is the webhooks' public one. `make run` makes a
token and prints how to scrape with it.
"""

from __future__ import annotations

import hmac

from flask import Blueprint, Response, current_app, request
from flask.typing import ResponseReturnValue
from prometheus_client import CONTENT_TYPE_LATEST

from app.clock import utcnow
from app.config import Config
from app.db import get_db
from app.metrics import scrape

bp = Blueprint("metrics", __name__)


def _token_matches(expected: str) -> bool:
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return False
    # Constant time, as bytes: compare_digest refuses a str with non-ASCII characters.
    return hmac.compare_digest(given.strip().encode("utf-8"), expected.encode("utf-8"))


@bp.get("/metrics")
def metrics() -> ResponseReturnValue:
    config: Config = current_app.config["RATCHET"]
    if not config.metrics_token:
        return Response(
            "/metrics is closed: set RATCHET_METRICS_TOKEN and scrape with "
            "Authorization: Bearer <RATCHET_METRICS_TOKEN>\n",
            status=403,
            mimetype="text/plain",
        )
    if not _token_matches(config.metrics_token):
        return Response(
            "a bearer token is required: Authorization: Bearer <RATCHET_METRICS_TOKEN>\n",
            status=401,
            mimetype="text/plain",
            headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
        )
    body = scrape(get_db(), utcnow(), config.prometheus_multiproc_dir)
    return Response(body, status=200, headers={"Content-Type": CONTENT_TYPE_LATEST})
