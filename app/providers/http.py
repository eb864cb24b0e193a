"""The one place outbound HTTP goes through: a shared transport and a TOTAL deadline.

A send has to end by its deadline (the worker's lease is computed from it), so every socket
operation under a request here is bounded by the time left until the deadline: connect,
TLS, each write and each read (`app/providers/transport.py`, which also keeps the
connection pools). The body is streamed and the deadline checked between chunks too.

Transport failures come out as `TransportError` subclasses that say whether the request may
have reached the provider (`request_sent`). Headers are never logged: they carry the token.
"""

from __future__ import annotations

import functools
import logging
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from json import dumps as json_dumps
from typing import Any
from urllib.parse import urlencode

import httpcore
import httpx

from app.providers.transport import bounded_by, close_transport, get_transport

__all__ = ["close_transport", "get_transport"]  # the shared transport, as before

log = logging.getLogger(__name__)

USER_AGENT = "ratchet/0.1"
_DEFAULT_HEADERS = {"User-Agent": USER_AGENT, "Accept": "*/*", "Accept-Encoding": "identity"}
# Provider answers are small JSON; a body beyond this is not an answer we can use, and
# reading it would only hold memory. The text is truncated, the status kept.
MAX_ANSWER_BYTES = 1024 * 1024


class TransportError(Exception):
    """No HTTP answer. `request_sent` is False only when the request provably never left."""

    request_sent: bool = True

    def __init__(self, description: str, *, request_sent: bool | None = None) -> None:
        super().__init__(description)
        self.description = description
        if request_sent is not None:
            self.request_sent = request_sent


class DeadlineExceededError(TransportError):
    """The total deadline passed before a full answer: the provider may hold the message."""


class ConnectionLostError(TransportError):
    """The connection broke mid-request (reset, closed early): the outcome is unknown."""


class ConnectFailedError(TransportError):
    """No connection could be made (refused, unreachable, DNS, TLS handshake, connect timeout).

    We chose `request_sent = False`: httpcore writes the first request byte only on an
    established (and, for https, handshaken) connection and retries nothing (`retries=0`),
    so a failure to connect proves the provider never saw this request. The failure class
    stays `unknown` (the retry path is the same), but the outcome is known: nothing for a
    webhook to answer, and no reason to hold a requeue to the old provider key. A connect
    that runs out of time lands here too, not in `DeadlineExceededError`, for that reason.
    """

    request_sent = False


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    status: int
    headers: dict[str, str]  # names lowercased; repeated headers joined with ", "
    text: str
    truncated: bool = False


# One transport (its pools: `app/providers/transport.py`) for every call of the process, used
# without an `httpx.Client` in front: a Client keeps a cookie jar, and the shared one would
# hand one tenant's provider cookies to the next tenant's call to the same host; it also
# merges settings, cookies and auth per request that a provider call never uses. Below it,
# a call goes to the pool as httpcore's request, not httpx's: httpx's request and response
# objects (its URL, headers, streams and decoders, built again at every call) cost a
# quarter of the client's CPU per call against a local server (1.1 ms against 0.8, one
# thread, 3,000 calls). What they did for us is done here: the URL parsed by httpx's
# parser (once per URL), the Host, length and type headers, the answer's headers joined
# and its body inflated if compressed unasked, and httpcore's exceptions (the ones httpx's
# mirror) sorted as before. No proxies from the environment and no redirects: a call goes
# exactly where the identity's base URL says, or fails.


def call_deadline(timeout: float, not_after: float | None = None) -> float:
    """The `time.monotonic()` instant a call begun now must end by: `timeout` from now,
    and never past `not_after` (a send's latest end inside its worker's lease, fixed
    before the call: a pause between the lease check and the call cannot stretch it)."""
    ends = time.monotonic() + timeout
    return ends if not_after is None else min(ends, not_after)


def post_json(url: str, json: Any, headers: Mapping[str, str], deadline: float) -> HttpAnswer:
    """POST `json`, and return the answer, whatever its status, by `deadline`.

    `deadline` is a `time.monotonic()` instant, not a duration: the caller's budget covers
    everything (connect, send, wait, read the whole body).
    """
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise DeadlineExceededError(
            "deadline passed before the request started", request_sent=False
        )
    content = json_dumps(json, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return _post_within(
        url, content.encode(), headers, deadline, remaining, content_type="application/json"
    )


def post_form(
    url: str, form: list[tuple[str, str]], headers: Mapping[str, str], deadline: float
) -> HttpAnswer:
    """POST `form` as application/x-www-form-urlencoded (Twilio), like `post_json`."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise DeadlineExceededError(
            "deadline passed before the request started", request_sent=False
        )
    content = urlencode(form).encode("ascii")
    form_headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
    form_headers["Content-Type"] = "application/x-www-form-urlencoded"
    return _post_within(url, content, form_headers, deadline, remaining)


def post_content(
    url: str, content: bytes, headers: Mapping[str, str], deadline: float, max_bytes: int
) -> HttpAnswer:
    """POST these exact bytes (a signed body must go out as signed), like `post_json`, and
    stop reading the answer after `max_bytes` (a status callback's receiver is not ours)."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise DeadlineExceededError(
            "deadline passed before the request started", request_sent=False
        )
    return _post_within(url, content, headers, deadline, remaining, max_bytes)


def _post_within(
    url: str,
    content: bytes,
    headers: Mapping[str, str],
    deadline: float,
    remaining: float,
    max_bytes: int = MAX_ANSWER_BYTES,
    *,
    content_type: str | None = None,
) -> HttpAnswer:
    started = time.monotonic()
    with bounded_by(deadline):
        answer = _post(url, content, headers, deadline, remaining, max_bytes, content_type)
    # The URL names the account, never the token; headers are never logged.
    log.debug("POST %s -> %s in %.3fs", url, answer.status, time.monotonic() - started)
    return answer


def _post(
    url: str,
    content: bytes,
    headers: Mapping[str, str],
    deadline: float,
    remaining: float,
    max_bytes: int,
    content_type: str | None,
) -> HttpAnswer:
    try:
        target, host = _parsed(url)
        request = httpcore.Request(
            b"POST",
            target,
            headers=_request_headers(host, headers, len(content), content_type),
            content=content,
            extensions={"timeout": dict.fromkeys(("connect", "read", "write", "pool"), remaining)},
        )
        response = get_transport().core_pool().handle_request(request)
        try:
            raw, truncated = _read(response, url, deadline, max_bytes)
        finally:
            response.close()
        answered = _answer_headers(response.headers)
        raw, truncated = _decoded(raw, answered.get("content-encoding"), url, max_bytes, truncated)
        return HttpAnswer(
            status=response.status,
            headers=answered,
            text=_decode(raw, _charset(answered.get("content-type"))),
            truncated=truncated,
        )
    except (httpcore.ConnectTimeout, httpcore.PoolTimeout) as exc:
        raise ConnectFailedError(f"could not connect to {url} in time: {_describe(exc)}") from exc
    except httpcore.TimeoutException as exc:
        raise DeadlineExceededError(f"deadline passed talking to {url}: {_describe(exc)}") from exc
    except (httpcore.ConnectError, httpcore.ProxyError, httpcore.UnsupportedProtocol) as exc:
        raise ConnectFailedError(f"could not connect to {url}: {_describe(exc)}") from exc
    except httpx.InvalidURL as exc:
        raise ConnectFailedError(f"invalid URL {url!r}: {exc}") from exc
    except httpcore.LocalProtocolError:
        # The HTTP library refused what we asked it to write (a header value it cannot
        # carry). Its words quote the value, which may be the Authorization header: they
        # are not kept. Nothing says at what point it refused, so the outcome stays unknown.
        raise ConnectionLostError(
            f"the request to {url} could not be written: LocalProtocolError (a header or "
            "body the HTTP library refused; its words are not kept, they may quote the token)"
        ) from None
    except (httpcore.NetworkError, httpcore.ProtocolError) as exc:
        # Reset, closed early, protocol error mid-answer: anything may have reached the
        # provider. A drop that lands just after the deadline is the deadline's doing.
        if time.monotonic() >= deadline:
            raise DeadlineExceededError(
                f"deadline passed talking to {url}: {_describe(exc)}"
            ) from exc
        raise ConnectionLostError(f"connection to {url} lost: {_describe(exc)}") from exc


@functools.lru_cache(maxsize=1024)
def _parsed(url: str) -> tuple[httpcore.URL, bytes]:
    """A URL parsed once (by httpx's parser), as the connection pool takes it, with its Host
    header: a provider's are a few per identity, posted to at every send, and parsing one
    cost about a thirtieth of a send's CPU. An invalid one raises each time (exceptions
    are not cached)."""
    parsed = httpx.URL(url)
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise httpcore.UnsupportedProtocol(f"Request URL {url!r} is not http(s) with a host")
    target = httpcore.URL(
        scheme=parsed.raw_scheme, host=parsed.raw_host, port=parsed.port, target=parsed.raw_path
    )
    return target, parsed.netloc


def _request_headers(
    host: bytes, headers: Mapping[str, str], length: int, content_type: str | None
) -> list[tuple[bytes, bytes]]:
    """What httpx's request would send: Host, our defaults, then the caller's, each
    replacing ours whatever its case; the body's type (unless the caller gave one) and
    length. A value outside ASCII raises, as httpx's encoding of it did."""
    sent = {name.lower(): (name, value) for name, value in _DEFAULT_HEADERS.items()}
    sent.update((name.lower(), (name, value)) for name, value in headers.items())
    if content_type is not None:
        sent.setdefault("content-type", ("Content-Type", content_type))
    sent.setdefault("content-length", ("Content-Length", str(length)))
    out = [] if "host" in sent else [(b"Host", host)]
    out += [(name.encode("ascii"), value.encode("ascii")) for name, value in sent.values()]
    return out


def _read(
    response: httpcore.Response, url: str, deadline: float, max_bytes: int
) -> tuple[bytes, bool]:
    """The body, up to `max_bytes` (then truncated), the deadline checked between chunks."""
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_stream():
        chunks.append(chunk)
        size += len(chunk)
        if size > max_bytes:
            return b"".join(chunks)[:max_bytes], True
        if time.monotonic() >= deadline:
            raise DeadlineExceededError(f"total deadline passed reading the body of {url}")
    return b"".join(chunks), False


def _answer_headers(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """Names lowercased, a repeated header's values joined with ", " (as httpx's did)."""
    headers: dict[str, str] = {}
    for name, value in raw:
        key, text = name.decode("latin-1").lower(), _header_text(value)
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return headers


def _header_text(value: bytes) -> str:
    for encoding in ("ascii", "utf-8"):
        try:
            return value.decode(encoding)
        except UnicodeDecodeError:
            continue
    return value.decode("latin-1")


def _decoded(
    raw: bytes, coding: str | None, url: str, max_bytes: int, truncated: bool
) -> tuple[bytes, bool]:
    """A body compressed unasked (we ask for `identity`): gzip and deflate inflated, at most
    `max_bytes` of it, as httpx read them; an unknown coding is left as it came. One that
    does not inflate is an answer we cannot read: the request reached the provider."""
    for name in reversed([c.strip().lower() for c in (coding or "").split(",") if c.strip()]):
        if name not in ("gzip", "deflate"):
            continue
        wbits = zlib.MAX_WBITS | 16 if name == "gzip" else zlib.MAX_WBITS
        try:
            try:
                inflater = zlib.decompressobj(wbits)
                out = inflater.decompress(raw, max_bytes + 1)
            except zlib.error:
                if name != "deflate":
                    raise
                inflater = zlib.decompressobj(-zlib.MAX_WBITS)  # deflate sent without its header
                out = inflater.decompress(raw, max_bytes + 1)
        except zlib.error as exc:
            raise ConnectionLostError(
                f"unreadable answer from {url}: DecodingError: {exc}"
            ) from exc
        truncated = truncated or len(out) > max_bytes or bool(inflater.unconsumed_tail)
        raw = out[:max_bytes]
    return raw, truncated


def _charset(content_type: str | None) -> str | None:
    for param in (content_type or "").split(";")[1:]:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset":
            return value.strip().strip("'\"") or None
    return None


def _describe(exc: BaseException) -> str:
    """The transport's own words (kept as the error's `raw`), e.g. "ConnectError: [Errno
    111] Connection refused"; some exceptions carry them only on their cause."""
    underlying = exc.__cause__ or exc.__context__
    detail = str(exc) or (str(underlying) if underlying is not None else "")
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


def _decode(content: bytes, charset: str | None) -> str:
    try:
        return content.decode(charset or "utf-8", errors="replace")
    except LookupError:
        return content.decode("utf-8", errors="replace")


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date), or None."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if seconds != seconds or seconds in (float("inf"), float("-inf")):
        return None
    return max(0.0, seconds)
