"""The log formatters on their own: a traceback stays one JSON line, a bearer token in a
line is masked, and a send's fields stay with the thread that is sending."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator

import pytest

from app.logs import (
    QUIET_LOGGERS,
    JsonFormatter,
    TextFormatter,
    configure_logging,
    log_context,
)


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO, logging.Handler]]:
    root = logging.getLogger()
    levels = {name: logging.getLogger(name).level for name in ("", *QUIET_LOGGERS)}
    handler = configure_logging("json", "INFO")
    stream = io.StringIO()
    handler.setStream(stream)  # type: ignore[attr-defined]
    yield logging.getLogger("tests.logs"), stream, handler
    root.removeHandler(handler)
    for name, level in levels.items():  # as it was, for the tests that run after
        logging.getLogger(name).setLevel(level)


def test_a_traceback_stays_on_its_one_json_line(
    captured: tuple[logging.Logger, io.StringIO, logging.Handler],
) -> None:
    log, stream, _ = captured
    try:
        raise RuntimeError("the provider went away\nmid-answer")
    except RuntimeError:
        log.exception("the send failed")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1
    entry = json.loads(lines[0])
    assert entry["message"] == "the send failed" and "RuntimeError" in entry["exception"]


def test_a_bearer_token_in_a_line_is_masked_in_both_formats() -> None:
    record = logging.LogRecord(
        "x", logging.WARNING, __file__, 1, "got %s", ("Authorization: Bearer abc.SECRET42",), None
    )
    for formatter in (JsonFormatter(), TextFormatter()):
        line = formatter.format(record)
        assert "SECRET42" not in line and "Bearer [masked]" in line


def test_a_sends_fields_stay_with_its_own_thread(
    captured: tuple[logging.Logger, io.StringIO, logging.Handler],
) -> None:
    log, stream, _ = captured
    inside = threading.Event()
    done = threading.Event()

    def other_send() -> None:
        with log_context(message_id=2, attempt=3, identity_id=9, lane="reply"):
            inside.set()
            done.wait(5)
            log.info("second")

    thread = threading.Thread(target=other_send)
    thread.start()
    inside.wait(5)
    with log_context(message_id=1, attempt=1, identity_id=4, lane="campaign"):
        log.info("first")
    log.info("outside")
    done.set()
    thread.join(5)
    entries = {e["message"]: e for e in map(json.loads, stream.getvalue().splitlines())}
    assert (entries["first"]["message_id"], entries["first"]["lane"]) == (1, "campaign")
    assert (entries["second"]["message_id"], entries["second"]["attempt"]) == (2, 3)
    assert "message_id" not in entries["outside"]
