"""The alert webhook: Slack-compatible JSON, signed with the shared secret, one POST at a
time with a total deadline (docs/alerts.md, "The alert webhook")."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from datetime import datetime, timedelta
from typing import Any

import httpx

from app.repo import alerts as repo
from app.repo.alert_reading import Reading
from app.repo.alert_signals import KIND_TITLES

SIGNATURE_HEADER = "X-Ratchet-Signature"
ID_HEADER = "X-Ratchet-Alert-Id"
POST_TIMEOUT = 5.0
BACKOFF_BASE, BACKOFF_MAX = 2.0, 600.0


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """`t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>." + body>` (docs/alerts.md)."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def backoff(attempts: int) -> timedelta:
    return timedelta(seconds=min(BACKOFF_MAX, BACKOFF_BASE * 2 ** max(attempts - 1, 0)))


def build_payload(
    episode_key: str,
    transition: str,
    reading: Reading,
    fired_at: datetime,
    fired_figures: dict[str, Any],
    cleared_at: datetime | None = None,
    cleared_figures: dict[str, Any] | None = None,
    dashboard_url: str = "",
) -> dict[str, Any]:
    """Slack-compatible (`text`), with the alert itself under `ratchet` for machines."""
    title = KIND_TITLES.get(reading.kind, reading.kind)
    mark = "FIRING" if transition == repo.FIRED else "CLEARED"
    return {
        "text": f"[{mark}] {title}: {reading.summary}"
        + (f" <{dashboard_url}/alerts>" if dashboard_url else ""),
        "ratchet": {
            "id": repo.post_key(episode_key, transition),
            "episode": episode_key,
            "transition": transition,
            "kind": reading.kind,
            "alert": reading.alert_key,
            "tenant_id": reading.tenant_id,
            "identity_id": reading.identity_id,
            "lane": reading.lane,
            "summary": reading.summary,
            "fired_at": fired_at.isoformat(),
            "fired_figures": fired_figures,
            "cleared_at": cleared_at.isoformat() if cleared_at else None,
            "cleared_figures": cleared_figures,
        },
    }


class AlertPoster:
    """Posts alerts to the configured URL. The URL may carry a secret of its own (a Slack
    webhook's path does), so what it reports names neither the URL nor the key."""

    def __init__(self, url: str, secret: str, http: httpx.Client | None = None) -> None:
        self.url = url
        self.secret = secret
        self.http = http

    def post(self, key: str, payload: dict[str, Any]) -> str | None:
        """POST one alert; None when the receiver took it (2xx), else what went wrong."""
        if self.http is None:
            self.http = httpx.Client(timeout=POST_TIMEOUT, follow_redirects=False)
        body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
        headers = {
            "Content-Type": "application/json",
            ID_HEADER: key,
            SIGNATURE_HEADER: sign(self.secret, int(time.time()), body),
        }
        try:
            response = self.http.post(self.url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            return self._scrub(f"{type(exc).__name__}: {exc}")
        if 200 <= response.status_code < 300:
            return None
        return self._scrub(f"HTTP {response.status_code}: {response.text[:200]}")

    def _scrub(self, text: str) -> str:
        for secret in (self.url, httpx.URL(self.url).path, self.secret):
            if secret and secret != "/":
                text = text.replace(secret, "[alert webhook]")
        return text

    def close(self) -> None:
        if self.http is not None:
            self.http.close()
            self.http = None
