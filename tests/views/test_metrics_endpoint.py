"""`GET /metrics`: refused without the configured bearer token, closed when none is
configured, and still answering (with `ratchet_database_up 0`) when the database does not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from prometheus_client.parser import text_string_to_metric_families

from app.config import Config, ConfigError
from app.launcher import ensure_metrics_token

from ..conftest import SECRET_KEY, free_port, make_app

TOKEN = "metrics-token-7f3a9c1e5b"


def close(app: Flask) -> None:
    app.extensions["ratchet.db"].dispose()
    app.extensions["ratchet.redis"].close()


@pytest.fixture
def guarded(pg_url: str, redis_url: str) -> Iterator[Flask]:
    app = make_app(pg_url, redis_url, metrics_token=TOKEN)
    yield app
    close(app)


def families(text: str) -> dict[str, object]:
    return {family.name: family for family in text_string_to_metric_families(text)}


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "",
        "Bearer",
        "Bearer wrong-token",
        f"Bearer {TOKEN}x",
        f"Bearer {TOKEN[:-1]}",
        f"Basic {TOKEN}",
        f"{TOKEN}",
        "Bearer tökén",
    ],
)
def test_a_missing_or_wrong_token_is_refused_with_no_figures(
    guarded: Flask, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    response = guarded.test_client().get("/metrics", headers=headers)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    body = response.get_data(as_text=True)
    assert "ratchet_" not in body and TOKEN not in body


def test_the_configured_token_opens_a_scrape_that_parses(guarded: Flask) -> None:
    response = guarded.test_client().get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    found = families(response.get_data(as_text=True))
    for name in (
        "ratchet_queue_oldest_due_age_seconds",
        "ratchet_queue_depth",
        "ratchet_messages",
        "ratchet_sends",
        "ratchet_provider_latency_seconds",
        "ratchet_webhooks_received",
        "ratchet_webhooks_rejected",
        "ratchet_webhook_statuses",
        "ratchet_pacing_waits",
        "ratchet_db_pings",
        "ratchet_db_connections_replaced",
        "ratchet_database_up",
    ):
        assert name in found, name


@pytest.mark.parametrize("authorization", [None, "Bearer ", "Bearer anything"])
def test_without_a_token_configured_the_scrape_is_closed_and_says_how_to_open_it(
    pg_url: str, redis_url: str, authorization: str | None
) -> None:
    app = make_app(pg_url, redis_url, metrics_token=None)
    headers = {} if authorization is None else {"Authorization": authorization}
    try:
        response = app.test_client().get("/metrics", headers=headers)
    finally:
        close(app)
    assert response.status_code == 403
    body = response.get_data(as_text=True)
    assert "ratchet_" not in body
    assert "set RATCHET_METRICS_TOKEN" in body


def test_with_the_database_away_the_scrape_still_answers_and_says_so(redis_url: str) -> None:
    app = make_app(
        f"postgresql+psycopg://127.0.0.1:{free_port()}/nowhere", redis_url, metrics_token=TOKEN
    )
    try:
        response = app.test_client().get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    finally:
        close(app)
    assert response.status_code == 200
    found = families(response.get_data(as_text=True))
    up = found["ratchet_database_up"]
    assert [sample.value for sample in up.samples] == [0]  # type: ignore[attr-defined]
    assert "ratchet_queue_depth" not in found
    assert "ratchet_sends" in found  # this process's counters are still there


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("RATCHET_LOG_FORMAT", "xml", "RATCHET_LOG_FORMAT must be text or json"),
        ("RATCHET_LOG_LEVEL", "LOUD", "RATCHET_LOG_LEVEL must be one of"),
        ("PROMETHEUS_MULTIPROC_DIR", "/nonexistent/ratchet-metrics", "is not a directory"),
    ],
)
def test_a_bad_metrics_or_log_setting_is_refused_at_start(
    name: str, value: str, problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem):
        Config.from_env({"SECRET_KEY": SECRET_KEY, name: value})


def test_the_settings_are_read_from_the_environment(tmp_path: object) -> None:
    config = Config.from_env(
        {
            "SECRET_KEY": SECRET_KEY,
            "RATCHET_METRICS_TOKEN": TOKEN,
            "RATCHET_LOG_FORMAT": "JSON",
            "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
        }
    )
    assert (config.metrics_token, config.log_format, config.log_level) == (TOKEN, "json", "INFO")
    assert config.prometheus_multiproc_dir == str(tmp_path)


def test_make_runs_launcher_makes_a_metrics_token_once_and_keeps_it_private(
    tmp_path: Path,
) -> None:
    path = ensure_metrics_token(tmp_path)
    token = path.read_text()
    assert len(token) >= 32
    assert path.stat().st_mode & 0o777 == 0o600
    assert ensure_metrics_token(tmp_path).read_text() == token  # kept across runs
