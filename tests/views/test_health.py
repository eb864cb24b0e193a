"""Liveness and readiness."""

from __future__ import annotations

from flask import Flask

from ..conftest import make_app


def test_healthz_answers_while_the_process_is_up(app: Flask) -> None:
    response = app.test_client().get("/healthz")
    assert response.status_code == 200 and response.get_json() == {"status": "ok"}


def test_readyz_is_ready_when_the_database_and_redis_answer(app: Flask) -> None:
    response = app.test_client().get("/readyz")
    assert response.status_code == 200
    assert response.get_json()["checks"] == {"database": "ok", "redis": "ok"}


def test_readyz_names_redis_when_it_cannot_be_reached(pg_url: str, unused_port: int) -> None:
    app = make_app(pg_url, f"redis://127.0.0.1:{unused_port}/0")
    response = app.test_client().get("/readyz")
    app.extensions["ratchet.db"].dispose()
    app.extensions["ratchet.redis"].close()
    assert response.status_code == 503
    assert response.get_json()["checks"] == {"database": "ok", "redis": "unreachable"}


def test_readyz_names_the_database_when_it_cannot_be_reached(
    redis_url: str, unused_port: int
) -> None:
    app = make_app(f"postgresql+psycopg://127.0.0.1:{unused_port}/none", redis_url)
    response = app.test_client().get("/readyz")
    app.extensions["ratchet.db"].dispose()
    app.extensions["ratchet.redis"].close()
    assert response.status_code == 503
    assert response.get_json()["checks"] == {"database": "unreachable", "redis": "ok"}
