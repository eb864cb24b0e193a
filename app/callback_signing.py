"""Standard Webhooks signing (https://www.standardwebhooks.com): what a status callback
carries so that any verifier library (`standardwebhooks` and its ports) accepts it.

Pure: no I/O. A secret is `whsec_` + base64 of 24 random bytes; the signature is
`v1,` + base64 of HMAC-SHA256 under those bytes of `<webhook-id>.<webhook-timestamp>.<body>`.
While a rolled secret's overlap lasts, both sign: the header holds both signatures,
space-separated, and a receiver holding either verifies.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from typing import Any

PREFIX = "whsec_"
SECRET_BYTES = 24


def new_secret() -> str:
    return PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def _key(secret: str) -> bytes:
    if not secret.startswith(PREFIX):
        raise ValueError("a signing secret starts with whsec_")
    return base64.b64decode(secret[len(PREFIX) :])


def signature(secret: str, webhook_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    mac = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()


def encode_body(payload: dict[str, Any]) -> bytes:
    """The bytes posted (and signed): the same payload gives the same bytes on every retry."""
    return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()


def headers(
    secrets_in_force: list[str], webhook_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(
            signature(secret, webhook_id, timestamp, body) for secret in secrets_in_force
        ),
    }


def mask(secret: str) -> str:
    """What a page may show of a secret: its prefix and last four characters."""
    return f"{PREFIX}…{secret[-4:]}"
