"""Checking a Meta delivery's signature against the identities it names, and the one
answer for a delivery that does not verify (the same bytes whether no identity was known
or the signature did not match, so the endpoint does not tell which identities exist)."""

from __future__ import annotations

import hmac
import logging

from flask.typing import ResponseReturnValue

from app.crypto import get_box
from app.json_errors import json_error
from app.providers.base import Provider
from app.repo.routing import RoutedIdentity

log = logging.getLogger("app.views.webhooks")

# The one answer for "no number named is ours" and "the signature does not match".
UNVERIFIED = "the delivery is not signed by an identity it names"


def refused(provider: Provider, *, known: bool) -> ResponseReturnValue:
    log.warning(
        "%s webhook refused: %s",
        provider.name,
        "the signature does not match" if known else "no known identity named",
    )
    return json_error(401, UNVERIFIED)


def verified(
    provider: Provider, raw: bytes, headers: dict[str, str], identities: list[RoutedIdentity]
) -> bool:
    box = get_box()
    secrets = [
        box.decrypt_remembered(identity.app_secret_encrypted)
        if identity.app_secret_encrypted
        else ""
        for identity in identities
    ]
    first = secrets[0]
    if not first or not provider.verify_signature(raw, headers, first):
        return False
    # Every known identity the delivery names must share the secret that verified it.
    # As bytes: compare_digest refuses a str with non-ASCII characters.
    return all(
        hmac.compare_digest(first.encode("utf-8"), other.encode("utf-8")) for other in secrets[1:]
    )
