"""Liveness and readiness for load balancers and the launcher."""

from __future__ import annotations

from flask import Blueprint, jsonify
from flask.typing import ResponseReturnValue

from app.db import get_db
from app.repo.health import database_is_reachable
from jobs.queues import is_reachable as redis_is_reachable

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz() -> ResponseReturnValue:
    """The process is up; nothing else is checked."""
    return jsonify(status="ok")


@bp.get("/readyz")
def readyz() -> ResponseReturnValue:
    """The database and Redis both answer."""
    checks = {
        "database": database_is_reachable(get_db()),
        "redis": redis_is_reachable(),
    }
    ready = all(checks.values())
    body = {
        "status": "ready" if ready else "unavailable",
        "checks": {name: "ok" if ok else "unreachable" for name, ok in checks.items()},
    }
    return jsonify(body), 200 if ready else 503
