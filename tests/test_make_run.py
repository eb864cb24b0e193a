"""`make run` serves /healthz on SQLite with the embedded server, and Ctrl-C stops every
process it started. Runs the real command, as a person would at a terminal."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from .conftest import free_port

ROOT = Path(__file__).resolve().parent.parent


def descendants(pid: int) -> set[int]:
    """Every live process below `pid`, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def is_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
def test_make_run_starts_the_system_and_ctrl_c_stops_everything_it_started(
    tmp_path: Path,
) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(RATCHET_PORT=str(port), RATCHET_INSTANCE=str(tmp_path / "instance"))
    log = (tmp_path / "make-run.log").open("w")
    make = subprocess.Popen(
        ["make", "--no-print-directory", "run"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, like a terminal's foreground job
    )
    started: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        output = ""
        while time.monotonic() < deadline and make.poll() is None:
            started |= descendants(make.pid)
            output = (tmp_path / "make-run.log").read_text()
            # The demo's last start-up line: the URL, the logins and its sends come before it.
            if "staff login:" in output and "demo traffic:" in output:
                break
            time.sleep(0.5)
        started |= descendants(make.pid)
        body = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).json()
        assert body == {"status": "ok"}, output
        ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).json()
        assert ready["checks"] == {"database": "ok", "redis": "ok"}, output
        for name in ("web", "reply", "campaign", "sweeper", "sandbox", "demo"):
            assert f"{name} started" in output.replace("  ", " "), (name, output)
        assert f"http://127.0.0.1:{port}/" in output
        # The printed URL opens on the sign-in page, and the printed login shows the overview.
        login = re.search(r"staff login: (\S+) / (\S+)", output)
        assert login is not None, output
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as browser:
            first = browser.get("/", follow_redirects=True)
            assert first.status_code == 200 and 'name="password"' in first.text
            token = re.search(r'name="csrf_token" value="([^"]+)"', first.text)
            assert token is not None
            signed_in = browser.post(
                "/sign-in",
                data={"email": login[1], "password": login[2], "csrf_token": token[1]},
                follow_redirects=True,
            )
            assert signed_in.status_code == 200 and "Overview" in signed_in.text
            assert "demo traffic: one message every 10 s" in output
        assert "embedded Redis-compatible server" in output
        # The workers' sends reach the web's /metrics (one multiprocess directory), and the
        # output a person follows is not crowded with gunicorn's start-up lines.
        # /metrics is closed without the token `make run` made; its output says how to scrape.
        assert httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).status_code == 401
        token_file = tmp_path / "instance" / "metrics_token"
        assert f'metrics: curl -H "Authorization: Bearer $(cat {token_file})"' in output
        scrape = {"Authorization": f"Bearer {token_file.read_text().strip()}"}
        assert token_file.read_text().strip() not in output
        deadline = time.monotonic() + 30
        while True:
            metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", headers=scrape, timeout=10).text
            sends = sum(
                float(line.rsplit(" ", 1)[1])
                for line in metrics.splitlines()
                if line.startswith("ratchet_sends_total{")
            )
            if sends >= 1 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert sends >= 1, metrics
        assert (tmp_path / "instance" / "prometheus").is_dir()
        assert "Booting worker" not in output
        assert (tmp_path / "instance" / "ratchet.db").exists()
        assert any(
            "valkey-server" in Path(f"/proc/{p}/cmdline").read_text(errors="replace")
            for p in started
            if is_alive(p)
        ), "no embedded server among the processes"

        before_stop = len((tmp_path / "make-run.log").read_text())
        os.killpg(make.pid, signal.SIGINT)  # what Ctrl-C does
        make.wait(timeout=60)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(is_alive(p) for p in started):
            time.sleep(0.2)
        assert [p for p in started if is_alive(p)] == []
        # An orderly stop: the workers first, then the embedded server (Ctrl-C reaches it
        # too; it used to stop with them, and each printed tracebacks of a Redis gone).
        stopping = (tmp_path / "make-run.log").read_text()[before_stop:]
        assert "Traceback" not in stopping, stopping
        last_worker = max(
            stopping.rindex(f"worker for the {lane} lane stopped") for lane in ("reply", "campaign")
        )
        assert stopping.rindex("stopped the embedded Redis-compatible server") > last_worker
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGINT)
            try:
                make.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(make.pid, signal.SIGKILL)
                make.wait()
        # A failed assertion above skipped the orderly stop: nothing it started may outlive
        # the test (the launcher's children run in process groups of their own).
        for pid in started:
            if is_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        log.close()
