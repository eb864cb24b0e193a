"""The hosts of tests/chaos/hosts.py themselves: a host reaches Redis over its link, a cut
makes its connections wait unanswered, a heal brings them back; everything made is gone
afterwards, even when the body failed; and where namespaces cannot be made the test is
skipped with the reason, never passed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import PG_URL, REDIS_URL
from .hosts import hosts, ip

PING = (
    "import sys, redis; print(redis.Redis.from_url(sys.argv[1], socket_connect_timeout=1).ping())"
)


def ping(prefix: list[str], url: str) -> str:
    result = subprocess.run(
        [*prefix, sys.executable, "-c", PING, url], capture_output=True, text=True, timeout=30
    )
    return result.stdout.strip() or result.stderr.strip().splitlines()[-1]


def test_a_host_reaches_redis_over_its_link_until_cut_and_again_once_healed(
    tmp_path: Path,
) -> None:
    with hosts(2, logs=tmp_path, pg_url=PG_URL, redis_url=REDIS_URL) as network:
        url = network.through("redis", REDIS_URL)
        first, second = network
        assert ping(first.prefix, url) == ping(second.prefix, url) == "True"
        assert ping(first.prefix, REDIS_URL).endswith("Connection refused.")  # its own lo
        second.cut()
        assert ping(second.prefix, url).endswith("Timeout connecting to server")
        assert ping(first.prefix, url) == "True"
        second.heal()
        assert ping(second.prefix, url) == "True"
        assert first.sent("redis") > 0 and second.sent("redis") > 0
        names = [host.namespace for host in network]
        links = [host.link for host in network]
        block = network.block
    assert not set(names) & set(ip("netns", "list").stdout.split())
    assert not [link for link in links if ip("link", "show", link, check=False).returncode == 0]
    assert f"{block}." not in ip("-4", "route", "show", "table", "all").stdout


def test_what_was_made_is_deleted_when_the_body_fails(tmp_path: Path) -> None:
    with (
        pytest.raises(RuntimeError, match="the body failed"),
        hosts(1, logs=tmp_path, pg_url=PG_URL, redis_url=REDIS_URL) as network,
    ):
        name, block = network[0].namespace, network.block
        raise RuntimeError("the body failed")
    assert name not in ip("netns", "list").stdout.split()
    assert f"{block}." not in ip("-4", "route", "show", "table", "all").stdout


def test_what_a_killed_run_left_is_deleted_by_the_next(tmp_path: Path) -> None:
    gone = dead_pid()
    ip("netns", "add", f"rtch{gone}h0")
    ip("route", "add", "unreachable", "10.250.0.0/16", "metric", str(gone))
    with hosts(1, logs=tmp_path, pg_url=PG_URL, redis_url=REDIS_URL):
        assert f"rtch{gone}h0" not in ip("netns", "list").stdout.split()
        assert "10.250.0.0/16" not in ip("-4", "route").stdout


def dead_pid() -> int:
    """The pid of a process that has ended."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_without_iproute2_the_test_is_skipped_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no `ip` to be found
    with (
        pytest.raises(pytest.skip.Exception, match="no `ip` command"),
        hosts(1, logs=tmp_path, pg_url=PG_URL, redis_url=REDIS_URL),
    ):
        raise AssertionError("the body ran without namespaces")
