"""DNS rebinding: a name that answers a public address to the check and 127.0.0.1 to the
next lookup. The POST connects to the checked address (app/providers/pinning.py), so
nothing reaches the loopback listener; before, httpx looked the name up again and the TLS
handshake reached it. The system resolver is the only thing stood in for (a rebinding
DNS server); the listener is real."""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

import jobs.callbacks as callbacks
from app.providers.http import post_content
from app.providers.pinning import pinned

from .receiver import Receiver

REBIND = "rebind.ratchet.invalid"
PUBLIC = "93.184.216.34"
_real = socket.getaddrinfo


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver(secret="whsec_" + "A" * 32).start()
    yield made
    made.stop()


def test_a_rebinding_name_does_not_reach_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    port = listener.getsockname()[1]
    answers = iter([PUBLIC])

    def rebinding(host: Any, port_: Any, *args: Any, **kwargs: Any) -> Any:
        if host == REBIND:  # public once (the check), loopback after
            return _real(next(answers, "127.0.0.1"), port_, *args, **kwargs)
        return _real(host, port_, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    config = SimpleNamespace(callback_allow_hosts=(), callback_timeout=0.5)
    claimed = SimpleNamespace(url=None, payload={"type": "message.sent"}, webhook_id="cb_1")
    try:
        answer = callbacks._post(
            config,  # type: ignore[arg-type]
            claimed,  # type: ignore[arg-type]
            f"https://{REBIND}:{port}/hook",
            ["whsec_" + "A" * 32],
        )
        # The connection, had it been made, was made before _post returned.
        knocked, _, _ = select.select([listener], [], [], 0)
    finally:
        listener.close()
    assert answer.status is None and answer.error
    assert not knocked, "a connection reached 127.0.0.1 past the address check"


def test_a_pinned_name_connects_to_its_address_and_keeps_its_name(receiver: Receiver) -> None:
    url = f"http://hooks.ratchet.invalid:{receiver.port}/hooks/ratchet"
    with pinned("hooks.ratchet.invalid", "127.0.0.1"):
        answer = post_content(url, b"{}", {}, time.monotonic() + 5, 1024)
    assert answer.status == 200
    assert [seen.path for seen in receiver.seen] == ["/hooks/ratchet"]
