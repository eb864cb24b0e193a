"""Logging for every process: readable text by default, one JSON object a line when
`RATCHET_LOG_FORMAT=json`.

1. `configure_logging` installs one handler on the root logger (stderr), at
   `RATCHET_LOG_LEVEL` (INFO by default). The chatty libraries are held at WARNING unless
   the level asks for DEBUG: RQ's per-job lines, httpx's per-request lines, Alembic's
   per-revision lines, the sandbox's request log. At INFO a person reads one line per send outcome.
2. `log_context(...)` names the message, identity, attempt and lane a piece of work is
   about; every line logged inside it, by any module, carries them: as fields in JSON, as
   a leading "message 12 attempt 1 (identity 3, campaign): " in text.
3. What is logged at INFO never holds a secret or a message body: the send lines carry ids
   and outcomes only, credentials never reach a log call (`Credentials` hides them from
   its repr), SQL parameters are kept out of database errors (`hide_parameters`), and as
   a last guard a bearer token or `access_token=` value in a line is masked.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

# The fields a line about one send carries, in the order a person reads them.
CONTEXT_FIELDS = ("message_id", "attempt", "identity_id", "lane")
# Other structured fields a caller may pass with `extra=`.
EXTRA_FIELDS = ("outcome",)
# Libraries whose INFO lines are one per job or request: quiet unless DEBUG is asked for.
QUIET_LOGGERS = ("rq", "httpx", "httpcore", "werkzeug", "alembic", "app.sandbox")

_context: ContextVar[Mapping[str, Any] | None] = ContextVar("ratchet_log_context", default=None)

_SECRET = re.compile(r"(?i)(\bbearer\s+|access_token=)[^\s\"'&,;]+")


def mask_secrets(text: str) -> str:
    return _SECRET.sub(lambda match: f"{match.group(1)}[masked]", text)


@contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Every line logged inside (on this thread or task) carries these fields."""
    token = _context.set({**(_context.get() or {}), **fields})
    try:
        yield
    finally:
        _context.reset(token)


class ContextFilter(logging.Filter):
    """Copies the current `log_context` onto each record (a handler filter, so it sees the
    records of every logger, not only those logged on one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in (_context.get() or {}).items():
            if not hasattr(record, name):
                setattr(record, name, value)
        return True


def _send_prefix(record: logging.LogRecord) -> str:
    message_id = getattr(record, "message_id", None)
    if message_id is None:
        return ""
    attempt = getattr(record, "attempt", None)
    where = ", ".join(
        str(part)
        for part in (
            f"identity {record.identity_id}" if hasattr(record, "identity_id") else None,
            getattr(record, "lane", None),
        )
        if part
    )
    return (
        f"message {message_id}"
        + (f" attempt {attempt}" if attempt is not None else "")
        + (f" ({where})" if where else "")
        + ": "
    )


class TextFormatter(logging.Formatter):
    """`2026-12-01 10:44:42Z INFO jobs.drain: message 1 attempt 1 (identity 1, campaign):
    accepted (sent)`."""

    def format(self, record: logging.LogRecord) -> str:
        moment = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(record.created))
        line = (
            f"{moment} {record.levelname} {record.name}: "
            f"{_send_prefix(record)}{record.getMessage()}"
        )
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return mask_secrets(line)


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, the send's fields, and the
    traceback (escaped, so still one line) if there is one."""

    def format(self, record: logging.LogRecord) -> str:
        moment = time.gmtime(record.created)
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", moment) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": mask_secrets(record.getMessage()),
        }
        for name in (*CONTEXT_FIELDS, *EXTRA_FIELDS):
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = mask_secrets(self.formatException(record.exc_info))
        return json.dumps(entry, default=str, ensure_ascii=False)


def configure_logging(log_format: str = "text", level: str = "INFO") -> logging.Handler:
    """Install (or replace) Ratchet's one handler on the root logger; returns it."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    handler.addFilter(ContextFilter())
    handler.ratchet = True  # type: ignore[attr-defined]
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "ratchet", False)]:
        root.removeHandler(old)
    root.addHandler(handler)
    numeric = logging.getLevelName(level)
    root.setLevel(numeric)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(
            logging.DEBUG if numeric <= logging.DEBUG else logging.WARNING
        )
    return handler
