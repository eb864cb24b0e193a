"""The real log output of a worker process sending: JSON one object a line when configured,
readable text by default; every line about a send names its message, attempt, identity and
lane; the identity's token and the message's body never appear; RQ's per-job lines do not."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from ..conftest import PG_URL, SECRET_KEY
from .conftest import Env

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "EAAG-sandbox-token-6b1f0e9d4c"
BODY = "Your one-time code is 493817"
RQ_CHATTER = ("Job OK", "jobs.drain.drain(", "Successfully completed", "Cleaning registries")


def run_worker(env: Env, log_format: str | None) -> tuple[str, str]:
    """A burst worker of the campaign lane, as `make run` starts one; (stdout, stderr)."""
    process_env = {
        **os.environ,
        "DATABASE_URL": PG_URL,
        "REDIS_URL": env.config.redis_url,
        "SECRET_KEY": SECRET_KEY,
        "PUBLIC_BASE_URL": env.base_url,
        "RATCHET_PROVIDER_TIMEOUT": "3",
    }
    process_env.pop("RATCHET_LOG_FORMAT", None)
    if log_format is not None:
        process_env["RATCHET_LOG_FORMAT"] = log_format
    done = subprocess.run(
        [sys.executable, "-m", "flask", "--app", "wsgi", "worker", "--lane", "campaign", "--burst"],
        cwd=ROOT,
        env=process_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout, done.stderr


def send_three(env: Env) -> tuple[dict[str, Any], dict[str, int]]:
    """Accepted, rate limited once (a warning inside the send), failed permanently."""
    # No webhooks: a `sent` beating the worker's record would make its line "accepted
    # (kept)", a race these tests are not about.
    number = env.number(token=TOKEN, statuses=[])
    env.sandbox("PATCH", f"/numbers/{number['phone_number_id']}", json={"token": TOKEN})
    ids = {
        "accepted": env.send(number, "15551250001", text=BODY),
        "rate_limited": env.send(number, "15550000004", text=BODY),
        "permanent": env.send(number, "15550000005", text=BODY),
    }
    return number, ids


def test_json_logs_are_one_object_a_line_with_the_sends_fields(env: Env) -> None:
    number, ids = send_three(env)
    stdout, stderr = run_worker(env, "json")

    lines = [json.loads(line) for line in stderr.splitlines() if line.strip()]
    assert lines, stderr
    for line in lines:
        assert {"time", "level", "logger", "message"} <= set(line), line
    about = {
        name: [line for line in lines if line.get("message_id") == i] for name, i in ids.items()
    }
    for name, found in about.items():
        assert found, (name, stderr)
        for line in found:
            assert line["attempt"] == 1, line
            assert line["identity_id"] == number["identity_id"], line
            assert line["lane"] == "campaign", line
    outcomes = {name: [line.get("outcome") for line in found] for name, found in about.items()}
    assert outcomes["accepted"] == ["accepted"]
    assert outcomes["permanent"] == ["failed"]
    # The provider's rate limit is a warning inside the send, and carries its fields too.
    assert [line["level"] for line in about["rate_limited"]] == ["warning", "info"]
    assert "130429" in about["rate_limited"][0]["message"]
    assert about["rate_limited"][1]["outcome"] == "retry"

    output = stdout + stderr
    assert TOKEN not in output and BODY not in output
    assert not any(chatter in output for chatter in RQ_CHATTER), output


def test_text_logs_are_one_readable_line_per_send_outcome_by_default(env: Env) -> None:
    number, ids = send_three(env)
    stdout, stderr = run_worker(env, None)

    identity = number["identity_id"]
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert not any(line.lstrip().startswith("{") for line in lines), stderr
    expected = {
        "accepted": r"INFO jobs\.drain: .*: accepted \(sent\)",
        "rate_limited": r"INFO jobs\.drain: .*: retry at \S+ \(rate_limited\)",
        "permanent": r"INFO jobs\.drain: .*: failed: permanent",
    }
    for name, message_id in ids.items():
        prefix = f"message {message_id} attempt 1 (identity {identity}, campaign): "
        mine = [line for line in lines if prefix in line]
        outcome = [line for line in mine if re.search(expected[name], line)]
        assert len(outcome) == 1, (name, stderr)
        assert re.match(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ INFO jobs\.drain: message ", outcome[0])
    warning = [line for line in lines if " WARNING " in line and "130429" in line]
    assert len(warning) == 1 and f"message {ids['rate_limited']} attempt 1" in warning[0]

    output = stdout + stderr
    assert TOKEN not in output and BODY not in output
    assert not any(chatter in output for chatter in RQ_CHATTER), output
    assert "worker for the campaign lane starting" in stdout


def test_a_database_error_shows_the_statement_but_not_its_values(env: Env) -> None:
    """SQL parameters (a message's body among them) stay out of a database error's text,
    which is what a log line about it shows."""
    with pytest.raises(IntegrityError) as raised, env.db.transaction() as session:
        session.execute(
            text(
                "INSERT INTO tenants (id, name, api_key_prefix, api_key_hash, created_at) "
                "VALUES (1000001, :name, :prefix, :hash, now())"
            ),
            [
                {"name": "first", "prefix": "p1", "hash": TOKEN},
                {"name": BODY, "prefix": "p2", "hash": TOKEN},  # the same id: refused
            ],
        )
    assert "INSERT INTO tenants" in str(raised.value)
    assert BODY not in str(raised.value) and TOKEN not in str(raised.value)
