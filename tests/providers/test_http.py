"""The one outbound HTTP place: a shared transport, a total deadline, typed transport errors."""

from __future__ import annotations

import gzip
import logging
import threading
import time
from datetime import UTC, datetime

import pytest

from app.providers import http
from app.providers.base import Credentials, OutboundMessage
from app.providers.http import (
    ConnectFailedError,
    ConnectionLostError,
    DeadlineExceededError,
    close_transport,
    get_transport,
    parse_retry_after,
    post_json,
)
from app.providers.whatsapp import WhatsAppProvider

from ..conftest import free_port
from .conftest import TOKEN, Answer, ScriptedServer

BODY = b'{"messaging_product":"whatsapp","messages":[{"id":"wamid.X"}]}'


def url(server: ScriptedServer) -> str:
    return f"{server.base_url}/123/messages"


def within(seconds: float) -> float:
    return time.monotonic() + seconds


def test_it_returns_any_answer_with_status_lowercased_headers_and_text(
    provider_server: ScriptedServer,
) -> None:
    provider_server.answer(
        Answer(
            418, "caf\u00e9", headers={"X-Thing": "1", "Content-Type": "text/plain; charset=utf-8"}
        )
    )

    answer = post_json(url(provider_server), {"a": 1}, {"X-Test": "yes"}, within(2))

    assert answer.status == 418
    assert answer.headers["x-thing"] == "1"
    assert answer.text == "caf\u00e9"
    assert not answer.truncated
    [request] = provider_server.requests
    assert request.json() == {"a": 1}
    assert request.headers["x-test"] == "yes"
    assert request.headers["user-agent"].startswith("ratchet/")


def test_the_transport_is_reused_and_keeps_its_connection(
    provider_server: ScriptedServer,
) -> None:
    provider_server.answer(Answer(200, BODY), Answer(200, BODY))

    transport = get_transport()
    post_json(url(provider_server), {}, {}, within(2))
    post_json(url(provider_server), {}, {}, within(2))

    assert get_transport() is transport
    first, second = provider_server.requests
    assert first.client_port == second.client_port


def test_the_transport_is_created_once_under_concurrent_first_use() -> None:
    seen: list[object] = []
    barrier = threading.Barrier(8)

    def first_use() -> None:
        barrier.wait()
        seen.append(get_transport())

    threads = [threading.Thread(target=first_use) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len({id(transport) for transport in seen}) == 1


def test_closing_the_transport_closes_its_connections_and_the_next_call_builds_a_new_one(
    provider_server: ScriptedServer,
) -> None:
    provider_server.answer(Answer(200, BODY), Answer(200, BODY))
    transport = get_transport()
    post_json(url(provider_server), {}, {}, within(2))

    close_transport()
    post_json(url(provider_server), {}, {}, within(2))

    assert get_transport() is not transport
    first, second = provider_server.requests
    assert first.client_port != second.client_port  # the kept connection was closed


def test_a_cookie_one_answer_sets_is_never_sent_with_a_later_call(
    provider_server: ScriptedServer,
) -> None:
    """Calls of every tenant share the transport: nothing one provider answer leaves (a
    cookie) may ride along with the next call, another tenant's maybe, to the same host."""
    provider_server.answer(
        Answer(200, BODY, headers={"Set-Cookie": "session=tenant-a; Path=/"}),
        Answer(200, BODY),
    )

    post_json(url(provider_server), {}, {"Authorization": "Bearer a"}, within(2))
    post_json(url(provider_server), {}, {"Authorization": "Bearer b"}, within(2))

    first, second = provider_server.requests
    assert "cookie" not in first.headers
    assert "cookie" not in second.headers
    assert second.headers["authorization"] == "Bearer b"


def test_a_caller_header_replaces_ours_whatever_its_case_and_no_compression_is_asked(
    provider_server: ScriptedServer,
) -> None:
    provider_server.answer(Answer(200, BODY), Answer(200, BODY))

    post_json(url(provider_server), {}, {"accept": "application/json"}, within(2))
    http.post_form(url(provider_server), [("To", "x")], {"content-type": "text/x"}, within(2))

    as_json, as_form = provider_server.requests
    assert as_json.header_names.count("accept") == 1
    assert as_json.headers["accept"] == "application/json"
    assert as_json.headers["accept-encoding"] == "identity"
    assert as_form.header_names.count("content-type") == 1
    assert as_form.headers["content-type"] == "application/x-www-form-urlencoded"


def test_an_answer_in_a_coding_it_cannot_read_is_a_lost_connection_not_a_crash(
    provider_server: ScriptedServer,
) -> None:
    # Compressed unasked, and not even valid gzip: the request reached the provider.
    provider_server.answer(Answer(200, "not gzip at all", headers={"Content-Encoding": "gzip"}))

    with pytest.raises(ConnectionLostError, match="unreadable answer") as raised:
        post_json(url(provider_server), {}, {}, within(2))
    assert raised.value.request_sent


def test_a_slow_answer_exceeds_the_deadline_after_the_request_was_sent(
    provider_server: ScriptedServer,
) -> None:
    # A deadline of a second: connecting to the local server fits in it on a busy machine
    # (0.3 s did not, once, with the suite in two processes beside other work).
    provider_server.answer(Answer(200, BODY, delay=5.0))

    with pytest.raises(DeadlineExceededError) as caught:
        post_json(url(provider_server), {}, {}, within(1.0))

    assert caught.value.request_sent is True
    assert len(provider_server.requests) == 1


@pytest.mark.parametrize("trickle_headers", [False, True], ids=["body", "status line and headers"])
def test_an_answer_trickled_byte_by_byte_is_cut_at_the_total_deadline(
    provider_server: ScriptedServer, trickle_headers: bool
) -> None:
    # Each byte arrives long before any per-read timeout: plain httpx would wait it out
    # (3 s or more here), however short its timeout.
    provider_server.answer(Answer(200, BODY, trickle=0.05, trickle_headers=trickle_headers))

    # No per-read timeout fires on a trickle: only the total deadline raises this. A second:
    # the connection itself must fit in it on a busy machine.
    with pytest.raises(DeadlineExceededError):
        post_json(url(provider_server), {}, {}, within(1.0))


def test_a_deadline_already_passed_sends_nothing(provider_server: ScriptedServer) -> None:
    with pytest.raises(DeadlineExceededError) as caught:
        post_json(url(provider_server), {}, {}, time.monotonic() - 1)

    assert caught.value.request_sent is False
    assert provider_server.requests == []


def test_a_reset_is_a_lost_connection_that_may_have_reached_the_provider(
    provider_server: ScriptedServer,
) -> None:
    provider_server.answer(Answer(reset=True))

    with pytest.raises(ConnectionLostError) as caught:
        post_json(url(provider_server), {}, {}, within(2))

    assert caught.value.request_sent is True


def test_a_refused_connection_fails_to_connect_and_provably_sent_nothing() -> None:
    with pytest.raises(ConnectFailedError) as caught:
        post_json(f"http://127.0.0.1:{free_port()}/v21.0/1/messages", {}, {}, within(2))

    assert caught.value.request_sent is False
    assert "127.0.0.1" in caught.value.description


def test_an_unusable_url_fails_to_connect() -> None:
    with pytest.raises(ConnectFailedError):
        post_json("ftp://example.invalid/v21.0/1/messages", {}, {}, within(2))


def test_an_oversized_answer_is_truncated_not_held_whole(provider_server: ScriptedServer) -> None:
    provider_server.answer(Answer(500, b"x" * (http.MAX_ANSWER_BYTES + 4096)))

    answer = post_json(url(provider_server), {}, {}, within(2))

    assert answer.status == 500
    assert answer.truncated
    assert len(answer.text) == http.MAX_ANSWER_BYTES


def test_the_token_is_never_logged_nor_shown(
    provider_server: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    provider_server.answer(Answer(200, BODY), Answer(reset=True))
    credentials = provider_server.credentials()
    caplog.set_level(logging.DEBUG)  # httpx and httpcore log every request at DEBUG
    provider = WhatsAppProvider()
    message = OutboundMessage(
        recipient="16505551234", body_text="hi", provider_key="k", correlation_id="c"
    )

    accepted = provider.send(credentials, message, timeout=2)
    lost = provider.send(credentials, message, timeout=2)

    assert accepted.accepted and lost.failure is not None
    assert caplog.records, "expected the HTTP stack to log at DEBUG"
    assert TOKEN not in caplog.text
    assert TOKEN not in repr(credentials) and "test-app-secret" not in repr(credentials)
    assert TOKEN not in repr(lost)


def test_credentials_hide_the_token_and_secret_from_repr() -> None:
    credentials = Credentials(
        account_id="1", base_url="https://graph.facebook.com/v21.0", token="s3cr3t", app_secret="sh"
    )
    assert "s3cr3t" not in repr(credentials)
    assert "'sh'" not in repr(credentials)
    assert "account_id='1'" in repr(credentials)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, None),
        ("17", 17.0),
        ("1.5", 1.5),
        ("-3", 0.0),
        ("soon", None),
        ("Wed, 30 Nov 2026 12:01:00 GMT", 60.0),
        ("Wed, 30 Nov 2026 11:59:00 GMT", 0.0),
    ],
)
def test_retry_after_is_read_as_seconds_or_an_http_date(
    header: str | None, expected: float | None
) -> None:
    now = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after(header, now) == expected


def test_the_request_carries_its_host_length_type_and_a_compact_json_body(
    provider_server: ScriptedServer,
) -> None:
    provider_server.answer(Answer(200, BODY))

    post_json(url(provider_server), {"text": "café", "n": [1, 2]}, {}, within(2))

    [seen] = provider_server.requests
    assert seen.body == '{"text":"café","n":[1,2]}'.encode()
    assert seen.headers["host"] == provider_server.base_url.split("/")[2]
    assert seen.headers["content-length"] == str(len(seen.body))
    assert seen.headers["content-type"] == "application/json"
    assert seen.headers["user-agent"] == http.USER_AGENT
    assert sorted(seen.header_names) == sorted(set(seen.header_names))  # none twice


def test_an_answer_compressed_unasked_is_read_inflated_and_its_charset_decoded(
    provider_server: ScriptedServer,
) -> None:
    provider_server.answer(
        Answer(200, gzip.compress(BODY), headers={"Content-Encoding": "gzip"}),
        Answer(
            200,
            "café".encode("latin-1"),
            headers={"Content-Type": "text/plain; charset=ISO-8859-1"},
        ),
    )

    assert post_json(url(provider_server), {}, {}, within(2)).text == BODY.decode()
    assert post_json(url(provider_server), {}, {}, within(2)).text == "café"


def test_an_answer_over_the_cap_is_truncated_even_compressed(
    provider_server: ScriptedServer,
) -> None:
    big = b"x" * 5000
    provider_server.answer(
        Answer(200, big), Answer(200, gzip.compress(big), headers={"Content-Encoding": "gzip"})
    )

    for _ in range(2):
        answer = http.post_content(url(provider_server), b"{}", {}, within(2), max_bytes=1000)
        assert (answer.text, answer.truncated) == ("x" * 1000, True)
