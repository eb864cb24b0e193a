"""Providers, one small module each, behind the `Provider` interface (base.py).

The registry is an explicit dict: adding a provider is one line here, never an import
side effect somewhere else.
"""

from __future__ import annotations

from .base import Provider
from .meta_messaging import MetaMessagingProvider
from .twilio import TwilioProvider
from .whatsapp import WhatsAppProvider

PROVIDERS: dict[str, Provider] = {
    "whatsapp": WhatsAppProvider(),
    "messenger": MetaMessagingProvider("messenger", "page"),
    "instagram": MetaMessagingProvider("instagram", "instagram"),
    "twilio": TwilioProvider(),
}


class UnknownProviderError(KeyError):
    """No provider by that name in `PROVIDERS`."""

    def __str__(self) -> str:
        # KeyError's own str() is the repr of its argument; this one is read by people.
        return str(self.args[0]) if self.args else "unknown provider"


def get_provider(name: str) -> Provider:
    try:
        return PROVIDERS[name]
    except KeyError:
        known = ", ".join(sorted(PROVIDERS))
        raise UnknownProviderError(f"unknown provider {name!r} (known: {known})") from None
