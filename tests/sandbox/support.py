"""Helpers for the sandbox tests, written independently of app.sandbox."""

import hashlib
import hmac
import json
import time
from collections.abc import Callable
from typing import Any

TEST_APP_SECRET = "test-app-secret"


def wait_until(predicate: Callable[[], Any], timeout: float = 5.0, what: str = "condition") -> Any:
    """Poll until predicate() is truthy and return its value; never a fixed long sleep."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def is_signed(body: bytes, header: str | None, secret: str = TEST_APP_SECRET) -> bool:
    """Meta's scheme: sha256= + hex HMAC-SHA256 of the raw body bytes, keyed with the secret."""
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return header is not None and hmac.compare_digest(expected, header)


def statuses_in(body: bytes) -> list[dict[str, Any]]:
    payload = json.loads(body)
    return [
        status
        for entry in payload["entry"]
        for change in entry["changes"]
        for status in change["value"].get("statuses", [])
    ]
