"""Ratchet: a send queue that never sends twice."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import Flask

from app.config import Config


def create_app(overrides: Mapping[str, Any] | None = None) -> Flask:
    """Build the app; nothing connects, logs or registers before this is called."""
    from app import cli, crypto, db
    from app.views import api, errors, health, webhooks
    from jobs import queues

    app = Flask(__name__, template_folder="../templates", static_folder="../static")
    config = Config.from_env(overrides=overrides)
    app.config["RATCHET"] = config
    app.config["SECRET_KEY"] = config.secret_key
    app.config["MAX_CONTENT_LENGTH"] = config.max_webhook_body

    db.init_app(app)
    queues.init_app(app)
    crypto.init_app(app)
    cli.init_app(app)
    errors.init_app(app)
    app.register_blueprint(health.bp)
    app.register_blueprint(api.bp)
    app.register_blueprint(webhooks.bp)
    return app
