"""IPv6 addresses that reach a private IPv4 (IPv4-compatible, NAT64, 6to4, Teredo) and
deprecated site-local fec0::/10 are refused like the private address itself; the public
ones they can embed still pass."""

from __future__ import annotations

import pytest

from app.callback_urls import CallbackUrlError, validate_callback_url


@pytest.mark.parametrize(
    "url",
    [
        "https://[::7f00:1]/hook",  # IPv4-compatible ::127.0.0.1
        "https://[::ffff:a00:1]/hook",  # IPv4-mapped ::ffff:10.0.0.1
        "https://[64:ff9b::a9fe:a9fe]/hook",  # NAT64 of 169.254.169.254
        "https://[64:ff9b::a00:1]/hook",  # NAT64 of 10.0.0.1
        "https://[64:ff9b:1::a00:1]/hook",  # local-use NAT64 (RFC 8215) of 10.0.0.1
        "https://[2002:a00:1::]/hook",  # 6to4 of 10.0.0.1
        "https://[2001:0:4136:e378:8000:63bf:f5ff:fffe]/hook",  # Teredo, client 10.0.0.1
        "https://[fec0::1]/hook",  # site-local
    ],
)
def test_an_address_embedding_a_private_one_is_refused(url: str) -> None:
    with pytest.raises(CallbackUrlError):
        validate_callback_url(url, ())


@pytest.mark.parametrize(
    "url", ["https://[2606:4700:4700::1111]/hook", "https://[2002:808:808::1]/hook"]
)
def test_public_addresses_still_pass(url: str) -> None:
    assert validate_callback_url(url, ()).url == url
