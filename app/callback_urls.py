"""Where a status callback may be posted: URL checks against SSRF (docs/callbacks.md).

A callback URL is the tenant's to choose, and Ratchet posts to it from inside its own
network: so https only, no credentials in it, and no address that is not public (private,
loopback, link-local, shared, reserved, multicast), checked on the name's addresses both
when the URL is registered and before every post (a name may be re-pointed later).
Hosts in `RATCHET_CALLBACK_ALLOW_HOSTS` skip the address check and may use http (a
receiver on the same machine in the tests and the demo).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Collection
from dataclasses import dataclass
from urllib.parse import urlsplit

MAX_URL_LENGTH = 2000

Resolver = Callable[[str], list[str]]


class CallbackUrlError(ValueError):
    """A URL Ratchet will not post to; the words say why."""


@dataclass(frozen=True, slots=True)
class CallbackUrl:
    url: str
    host: str  # lowercased, without brackets or port


def resolve(host: str) -> list[str]:
    """Every address the name has now (the system's resolver)."""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        raise CallbackUrlError(f"the host {host!r} cannot be resolved") from exc
    return sorted({str(info[4][0]) for info in infos})


# IPv6 prefixes that carry an IPv4 address in their last 32 bits (NAT64, RFC 6052 and
# RFC 8215; IPv4-compatible): a private IPv4 inside one is as private as it is bare.
_EMBEDS_IPV4 = (
    ipaddress.IPv6Network("64:ff9b::/96"),
    ipaddress.IPv6Network("64:ff9b:1::/48"),
    ipaddress.IPv6Network("::/96"),
)
# Deprecated site-local (RFC 3879): some stacks still route it inside a site.
_SITE_LOCAL = ipaddress.IPv6Network("fec0::/10")


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address reaches through (mapped, 6to4, Teredo, NAT64,
    IPv4-compatible)."""
    found: list[ipaddress.IPv4Address] = []
    if ip.ipv4_mapped is not None:
        found.append(ip.ipv4_mapped)
    if ip.sixtofour is not None:
        found.append(ip.sixtofour)
    if ip.teredo is not None:
        found.extend(ip.teredo)
    if any(ip in network for network in _EMBEDS_IPV4):
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
    return found


def _is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in _SITE_LOCAL:
            return False
        embedded = _embedded_ipv4(ip)
        if embedded:
            return all(_is_public(str(inner)) for inner in embedded)
    return ip.is_global and not ip.is_multicast


def parse_callback_url(raw: object, allow_hosts: Collection[str]) -> CallbackUrl:
    """The URL's shape: https (http only for an allowed host), a host, no credentials."""
    if not isinstance(raw, str) or not raw:
        raise CallbackUrlError("must be a URL string")
    if len(raw) > MAX_URL_LENGTH:
        raise CallbackUrlError(f"must be at most {MAX_URL_LENGTH} characters")
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in raw):
        raise CallbackUrlError("must not contain spaces or control characters")
    try:
        parts = urlsplit(raw)
        host = (parts.hostname or "").lower()
        parts.port  # noqa: B018  (raises on a port that is not a number in range)
    except ValueError as exc:
        raise CallbackUrlError(f"is not a valid URL: {exc}") from exc
    if not host:
        raise CallbackUrlError("must name a host")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise CallbackUrlError("must not carry credentials (user:password@)")
    if parts.fragment:
        raise CallbackUrlError("must not have a #fragment")
    allowed = host in allow_hosts
    if parts.scheme != "https" and not (allowed and parts.scheme == "http"):
        raise CallbackUrlError("must use https")
    return CallbackUrl(raw, host)


def check_destination(
    target: CallbackUrl, allow_hosts: Collection[str], resolver: Resolver = resolve
) -> str | None:
    """Refuse a host whose addresses are not all public (an allowed host is not asked);
    returns the checked address to connect to (None for an allowed host), so the POST goes
    where the check looked (app/providers/pinning.py), not where a second lookup points."""
    if target.host in allow_hosts:
        return None
    try:
        addresses = [str(ipaddress.ip_address(target.host))]
    except ValueError:
        if target.host == "localhost" or target.host.endswith((".localhost", ".local")):
            raise CallbackUrlError(f"the host {target.host!r} is not public") from None
        addresses = resolver(target.host)
    if not addresses:
        raise CallbackUrlError(f"the host {target.host!r} has no address")
    for address in addresses:
        if not _is_public(address):
            raise CallbackUrlError(
                f"the host {target.host!r} resolves to {address}, which is not a public "
                "address (private, loopback, link-local or reserved)"
            )
    return addresses[0].split("%", 1)[0]


def validate_callback_url(
    raw: object, allow_hosts: Collection[str], resolver: Resolver = resolve
) -> CallbackUrl:
    target = parse_callback_url(raw, allow_hosts)
    check_destination(target, allow_hosts, resolver)
    return target
