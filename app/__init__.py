"""Ratchet: a send queue that never sends twice."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import Flask

from app.config import Config


def create_app(overrides: Mapping[str, Any] | None = None) -> Flask:
    """Build the app; nothing connects, logs or registers before this is called."""
    from htmx_flask import Htmx

    from app import auth, cli, crypto, db, inputs, proxies, security_headers
    from app.views import (
        alerts,
        api,
        audit,
        bulk,
        charts,
        dead_letters,
        dead_letters_new,
        dead_letters_rows,
        errors,
        exports,
        health,
        identities,
        me,
        message_list,
        messages,
        overview,
        pages,
        provider_events,
        search,
        staff_admin,
        stuck,
        tenant_settings,
        webhooks,
        workers,
    )
    from app.views import auth as sign_in
    from jobs import queues

    app = Flask(__name__, template_folder="../templates", static_folder="../static")
    config = Config.from_env(overrides=overrides)
    app.config["RATCHET"] = config
    app.config["SECRET_KEY"] = config.secret_key
    app.config["MAX_CONTENT_LENGTH"] = config.max_webhook_body

    proxies.init_app(app)
    inputs.init_app(app)
    security_headers.init_app(app)
    db.init_app(app)
    queues.init_app(app)
    crypto.init_app(app)
    cli.init_app(app)
    errors.init_app(app)
    auth.init_app(app)
    pages.init_app(app)
    Htmx(app)
    # The machine-facing areas authenticate by key or signature, never by cookie: no CSRF.
    auth.csrf.exempt(api.bp)
    auth.csrf.exempt(message_list.bp)
    auth.csrf.exempt(webhooks.bp)
    app.register_blueprint(health.bp)
    app.register_blueprint(api.bp)
    app.register_blueprint(message_list.bp)
    app.register_blueprint(webhooks.bp)
    # The support dashboard.
    app.register_blueprint(sign_in.bp)
    app.register_blueprint(overview.bp)
    app.register_blueprint(stuck.bp)
    app.register_blueprint(workers.bp)
    app.register_blueprint(charts.bp)
    app.register_blueprint(exports.bp)
    app.register_blueprint(dead_letters_new.bp)
    app.register_blueprint(dead_letters_rows.bp)
    app.register_blueprint(me.bp)
    app.register_blueprint(dead_letters.bp)
    app.register_blueprint(messages.bp)
    app.register_blueprint(search.bp)
    app.register_blueprint(alerts.bp)
    # For a Prometheus scraper (internal, like /readyz).
    from app.views import metrics

    app.register_blueprint(metrics.bp)
    # Twilio's status callbacks (signed with the identity's Auth Token).
    from app.views import twilio_webhooks

    auth.csrf.exempt(twilio_webhooks.bp)
    app.register_blueprint(twilio_webhooks.bp)
    app.register_blueprint(bulk.bp)
    app.register_blueprint(audit.bp)
    app.register_blueprint(identities.bp)
    app.register_blueprint(provider_events.bp)
    app.register_blueprint(staff_admin.bp)
    app.register_blueprint(tenant_settings.bp)
    # Status callbacks: the API's endpoints (by key, no CSRF) and the admins' pages.
    from app.views import callback_api, callback_pages

    auth.csrf.exempt(callback_api.bp)
    app.register_blueprint(callback_api.bp)
    app.register_blueprint(callback_pages.bp)
    # Last, over every keyed blueprint: a flood past a tenant's rate is refused before Flask.
    from app.views import intake_gate

    intake_gate.init_app(app, api.require_api_key)
    return app
