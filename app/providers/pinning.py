"""Pinned addresses: a name connected to at the address that was checked, not at whatever
the resolver answers a moment later (DNS rebinding, docs/callbacks.md).

A status callback's host is resolved and its addresses checked before each POST
(app/callback_urls.py); `pinned(host, address)` around the POST makes the shared network
backend (app/providers/http.py) open its TCP connection to that address. The URL, the Host
header, TLS's server name and the certificate's check keep the name. A context variable,
so it holds for this thread's call only.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

_pins: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "ratchet_pinned_addresses", default=None
)


@contextmanager
def pinned(host: str, address: str | None) -> Iterator[None]:
    """Within the block, connections to `host` go to `address` (None: not pinned)."""
    if address is None:
        yield
        return
    token = _pins.set({**(_pins.get() or {}), host.lower(): address})
    try:
        yield
    finally:
        _pins.reset(token)


def address_for(host: str) -> str:
    """Where a connection to `host` goes: its pinned address, else the name itself."""
    pins = _pins.get()
    if not pins:
        return host
    return pins.get(host.lower().strip("[]"), host)
