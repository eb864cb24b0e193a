"""Settings, read once from the environment inside `create_app`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from app.shards import MAX_SHARDS


class ConfigError(RuntimeError):
    """A setting is missing or malformed; raised at start, never at import."""


def env_int(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} must be a whole number, got {raw!r}") from exc


def env_float(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from exc


@dataclass(frozen=True, slots=True)
class Config:
    database_url: str
    redis_url: str
    secret_key: str
    public_base_url: str
    # Sending (docs/design.md section 7); seconds unless named otherwise.
    provider_timeout: float = 10.0
    webhook_grace: float = 15.0
    backoff_base: float = 2.0
    backoff_max: float = 300.0
    retry_after_max: float = 900.0
    pair_limit_wait: float = 6.0
    # A recipient's next message waits at most this long behind an earlier one's retry.
    conversation_hold: float = 60.0
    cap_unknown: int = 5
    cap_rate_limited: int = 10
    lease_margin: float = 5.0
    # PostgreSQL ends a session idle inside a transaction this long (a stopped process).
    db_idle_in_transaction: float = 10.0
    # Drains and pacing (docs/design.md section 7).
    drain_slice: float = 5.0  # a drain hands its worker back after this long
    drain_batch: int = 100  # messages claimed and sent together, at most
    # Provider calls in flight per drain, at most: a ceiling, since the pace keeps them
    # near rate x answer time; each a thread that only calls (no database connection).
    drain_concurrency: int = 512
    # One lane's shards (`app/shards.py`): ceil(lane rate / shard_rate), 1 to shard_max, each
    # drained by its own job, so that many workers send one number's messages.
    shard_rate: float = 250.0
    shard_max: int = 8
    pacing_burst: float = 0.1  # a bucket's burst, in seconds of its rate
    # How far ahead a campaign's slots may be granted, each call started at its own slot:
    # a drain below a worker's speed then claims a dozen messages a step, not a few. Off by
    # default: on a loaded machine the calls of one step, held up, land beside the next's.
    pacing_ahead: float = 0.0
    pacing_slowdown: float = 60.0  # how long a provider's rate-limit answer halves the pace
    # The dashboard: a due message older than this, unclaimed, is stuck (seconds).
    stuck_after: float = 60.0
    # The sweeper (docs/design.md section 2).
    sweep_interval: float = 2.0
    parked_max_age_days: int = 7
    parked_retry_window: float = 600.0
    # Alerts (docs/alerts.md); seconds unless named otherwise.
    alert_interval: float = 10.0  # how often the sweeper evaluates the alerts
    alert_webhook_url: str = ""  # Slack-compatible JSON posts on firing and clearing
    alert_webhook_secret: str = ""  # HMAC-SHA256 key the posts are signed with
    alert_rate_window: float = 3600.0  # the recent sends the delivered rate is taken over
    alert_rate_settle: float = 600.0  # a send younger than this may not be delivered yet
    alert_rate_baseline: float = 7 * 86400.0  # the identity's own history before the window
    alert_rate_drop: float = 0.5  # fires below (1 - drop) x the baseline's delivered rate
    alert_rate_min_sends: int = 20  # in the window and in the baseline, before it may fire
    alert_dwell_hours: float = 6.0  # `sent` with no `delivered` for longer than this
    alert_dead_letters: int = 50  # failed messages per identity within the window below
    alert_dead_letter_window: float = 600.0
    # Status callbacks (docs/callbacks.md); seconds unless named otherwise.
    callback_allow_hosts: tuple[str, ...] = ()  # may use http and non-public addresses
    callback_timeout: float = 10.0  # one POST, whole (connect to last byte)
    callback_concurrency: int = 16  # POSTs in flight per endpoint
    callback_rate: int = 0  # POSTs started per second per endpoint, at most (0: no limit)
    callback_retry_window: float = 86400.0  # retried this long after the change, then given up
    callback_disable_after: int = 50  # failed attempts in a row that disable an endpoint
    # Request limits.
    max_api_body: int = 64 * 1024
    max_webhook_body: int = 1024 * 1024
    # /metrics: a bearer token (None: open), and prometheus-client's multiprocess directory.
    metrics_token: str | None = None
    prometheus_multiproc_dir: str | None = None
    # How many reverse proxies in front of the app set X-Forwarded-For/-Proto (0: none,
    # the socket's address is the client's). See docs/security.md.
    trusted_proxies: int = 0
    # Logs: "text" (readable, the default) or "json" (one object a line), and the level.
    log_format: str = "text"
    log_level: str = "INFO"
    # Werkzeug's password hash method. Not read from the environment: only code that
    # builds the app (the test suite, for a fast one) may give another.
    password_hash: str = "scrypt"

    @property
    def lease_seconds(self) -> float:
        """Twice the provider deadline plus a margin, so a live call always ends inside it,
        and at least the deadline plus the webhook grace, so a re-claim after a lost lease
        has waited as long for the webhook as any other unknown outcome."""
        return max(
            2 * self.provider_timeout + self.lease_margin,
            self.provider_timeout + self.webhook_grace,
        )

    @property
    def drain_lease_seconds(self) -> float:
        """How long a drain's claim on its identity and lane lasts without renewal: a
        killed or stopped drain strands them no longer than this."""
        return self.drain_slice + self.lease_seconds

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, overrides: Mapping[str, Any] | None = None
    ) -> Config:
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {
            "database_url": env.get("DATABASE_URL") or "sqlite:///instance/ratchet.db",
            "redis_url": env.get("REDIS_URL") or "redis://127.0.0.1:6379/0",
            "secret_key": env.get("SECRET_KEY", ""),
            "public_base_url": (env.get("PUBLIC_BASE_URL") or "http://127.0.0.1:8000").rstrip("/"),
            "provider_timeout": env_float(env, "RATCHET_PROVIDER_TIMEOUT", 10.0),
            "webhook_grace": env_float(env, "RATCHET_WEBHOOK_GRACE", 15.0),
            "lease_margin": env_float(env, "RATCHET_LEASE_MARGIN", 5.0),
            "db_idle_in_transaction": env_float(env, "RATCHET_DB_IDLE_IN_TRANSACTION", 10.0),
            "cap_unknown": env_int(env, "RATCHET_CAP_UNKNOWN", 5),
            "cap_rate_limited": env_int(env, "RATCHET_CAP_RATE_LIMITED", 10),
            "conversation_hold": env_float(env, "RATCHET_CONVERSATION_HOLD", 60.0),
            "drain_slice": env_float(env, "RATCHET_DRAIN_SLICE", 5.0),
            "drain_batch": env_int(env, "RATCHET_DRAIN_BATCH", 100),
            "drain_concurrency": env_int(env, "RATCHET_DRAIN_CONCURRENCY", 512),
            "shard_rate": env_float(env, "RATCHET_SHARD_RATE", 250.0),
            "shard_max": env_int(env, "RATCHET_SHARD_MAX", 8),
            "pacing_burst": env_float(env, "RATCHET_PACING_BURST", 0.1),
            "pacing_ahead": env_float(env, "RATCHET_PACING_AHEAD", 0.0),
            "pacing_slowdown": env_float(env, "RATCHET_PACING_SLOWDOWN", 60.0),
            "stuck_after": env_float(env, "RATCHET_STUCK_AFTER", 60.0),
            "sweep_interval": env_float(env, "RATCHET_SWEEP_INTERVAL", 2.0),
            "alert_interval": env_float(env, "RATCHET_ALERT_INTERVAL", 10.0),
            "alert_webhook_url": env.get("RATCHET_ALERT_WEBHOOK_URL", ""),
            "alert_webhook_secret": env.get("RATCHET_ALERT_WEBHOOK_SECRET", ""),
            "alert_rate_window": env_float(env, "RATCHET_ALERT_RATE_WINDOW", 3600.0),
            "alert_rate_settle": env_float(env, "RATCHET_ALERT_RATE_SETTLE", 600.0),
            "alert_rate_baseline": env_float(env, "RATCHET_ALERT_RATE_BASELINE", 7 * 86400.0),
            "alert_rate_drop": env_float(env, "RATCHET_ALERT_RATE_DROP", 0.5),
            "alert_rate_min_sends": env_int(env, "RATCHET_ALERT_RATE_MIN_SENDS", 20),
            "alert_dwell_hours": env_float(env, "RATCHET_ALERT_DWELL_HOURS", 6.0),
            "alert_dead_letters": env_int(env, "RATCHET_ALERT_DEAD_LETTERS", 50),
            "alert_dead_letter_window": env_float(env, "RATCHET_ALERT_DEAD_LETTER_WINDOW", 600.0),
            "callback_allow_hosts": tuple(
                host.strip().lower()
                for host in env.get("RATCHET_CALLBACK_ALLOW_HOSTS", "").split(",")
                if host.strip()
            ),
            "callback_timeout": env_float(env, "RATCHET_CALLBACK_TIMEOUT", 10.0),
            "callback_concurrency": env_int(env, "RATCHET_CALLBACK_CONCURRENCY", 16),
            "callback_rate": env_int(env, "RATCHET_CALLBACK_RATE", 0),
            "callback_retry_window": env_float(env, "RATCHET_CALLBACK_RETRY_WINDOW", 86400.0),
            "callback_disable_after": env_int(env, "RATCHET_CALLBACK_DISABLE_AFTER", 50),
            "metrics_token": env.get("RATCHET_METRICS_TOKEN") or None,
            "prometheus_multiproc_dir": env.get("PROMETHEUS_MULTIPROC_DIR") or None,
            "trusted_proxies": env_int(env, "RATCHET_TRUSTED_PROXIES", 0),
            "log_format": (env.get("RATCHET_LOG_FORMAT") or "text").lower(),
            "log_level": (env.get("RATCHET_LOG_LEVEL") or "INFO").upper(),
        }
        config = cls(**values)
        if overrides:
            known = {f.name for f in fields(cls)}
            unknown = set(overrides) - known
            if unknown:
                raise ConfigError(f"unknown settings: {', '.join(sorted(unknown))}")
            config = replace(config, **dict(overrides))
        check_observability(config)
        if len(config.secret_key) < 16:
            raise ConfigError(
                "SECRET_KEY is missing or shorter than 16 characters; "
                "`make run` generates one into instance/secret_key"
            )
        idle = config.db_idle_in_transaction
        if not (idle == 0 or 0.001 <= idle <= 86_400):
            raise ConfigError(
                "RATCHET_DB_IDLE_IN_TRANSACTION must be 0 (off) or between 0.001 and 86400 "
                f"seconds, got {idle!r}"
            )
        if not (config.shard_rate > 0 and 1 <= config.shard_max <= MAX_SHARDS):
            raise ConfigError(
                "RATCHET_SHARD_RATE must be above 0 and RATCHET_SHARD_MAX between 1 and "
                f"{MAX_SHARDS}, got {config.shard_rate!r} and {config.shard_max!r}"
            )
        if not 0 <= config.pacing_ahead <= 2:
            raise ConfigError(
                "RATCHET_PACING_AHEAD must be between 0 (a slot granted only when free) and 2 "
                f"seconds, got {config.pacing_ahead!r}"
            )
        if not 0 <= config.trusted_proxies <= 5:
            raise ConfigError(
                "RATCHET_TRUSTED_PROXIES must be the number of reverse proxies in front of "
                f"Ratchet, 0 to 5, got {config.trusted_proxies!r}"
            )
        if config.alert_webhook_url and len(config.alert_webhook_secret) < 16:
            raise ConfigError(
                "RATCHET_ALERT_WEBHOOK_URL is set but RATCHET_ALERT_WEBHOOK_SECRET is missing or "
                "shorter than 16 characters: the alert posts are signed with it"
            )
        return config


LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def check_observability(config: Config) -> None:
    """The metrics and log settings, refused at start with what is wrong."""
    if config.log_format not in LOG_FORMATS:
        raise ConfigError(f"RATCHET_LOG_FORMAT must be text or json, got {config.log_format!r}")
    if config.log_level not in LOG_LEVELS:
        raise ConfigError(
            f"RATCHET_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}, got {config.log_level!r}"
        )
    directory = config.prometheus_multiproc_dir
    if directory is not None and not os.path.isdir(directory):
        raise ConfigError(
            f"PROMETHEUS_MULTIPROC_DIR {directory!r} is not a directory; create it (empty) "
            "before starting the processes that share it"
        )
