"""The alert settings: read from the environment, and a webhook without its secret refused."""

from __future__ import annotations

import pytest

from app.config import Config, ConfigError

from .conftest import SECRET_KEY


def test_the_alert_settings_are_read_from_the_environment() -> None:
    config = Config.from_env(
        {
            "SECRET_KEY": SECRET_KEY,
            "RATCHET_ALERT_WEBHOOK_URL": "https://hooks.example/alerts",
            "RATCHET_ALERT_WEBHOOK_SECRET": "s" * 32,
            "RATCHET_ALERT_DWELL_HOURS": "12",
            "RATCHET_ALERT_RATE_DROP": "0.3",
            "RATCHET_ALERT_DEAD_LETTERS": "7",
        }
    )
    assert config.alert_webhook_url == "https://hooks.example/alerts"
    assert (config.alert_dwell_hours, config.alert_rate_drop, config.alert_dead_letters) == (
        12.0,
        0.3,
        7,
    )


def test_an_alert_webhook_without_its_signing_secret_is_refused_at_start() -> None:
    with pytest.raises(ConfigError, match="RATCHET_ALERT_WEBHOOK_SECRET"):
        Config.from_env(
            {"SECRET_KEY": SECRET_KEY, "RATCHET_ALERT_WEBHOOK_URL": "https://hooks.example/a"}
        )
