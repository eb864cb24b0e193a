"""Meta's webhook signature, the same for WhatsApp, Messenger and Instagram:
`X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body, keyed with the app secret>`
(Meta's webhooks docs). The legacy SHA-1 header alone is not accepted."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from .parsing import header

SIGNATURE_HEADER = "x-hub-signature-256"
SIGNATURE_PREFIX = "sha256="


def verify(raw_body: bytes, headers: Mapping[str, str], secret: str) -> bool:
    if not secret:
        return False
    received = header(headers, SIGNATURE_HEADER)
    if received is None or not received.startswith(SIGNATURE_PREFIX):
        return False
    # The secret as UTF-8, as Meta keys the HMAC; it may hold non-ASCII characters.
    expected = hmac.new(secret.encode("utf-8"), raw_body, hashlib.sha256).hexdigest()
    # Bytes on both sides: compare_digest refuses non-ASCII str, and a forged header
    # may hold anything.
    given = received[len(SIGNATURE_PREFIX) :].strip().lower().encode("utf-8", "replace")
    return hmac.compare_digest(expected.encode("ascii"), given)
