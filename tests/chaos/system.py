"""The whole system as separate processes for a fault run: the web under gunicorn, workers
on a lane, the sweeper, and the operator's CLI, all on the run's own PostgreSQL cluster
and Redis database; the sandbox is the suite's own process.

Where a process runs is a host's business: `System.host_prefix` gives the command prefix
that places it (none: this machine's own network). A run across several hosts (network
namespaces, each with its own address) sets it per process name; everything else here
is the same.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from ..conftest import SECRET_KEY, free_port
from ..jobs.processes import ROOT, die_with_parent, stop_all
from .private_pg import PrivatePostgres

# Placement of a process by name ("web", "worker3", "sweeper", "cli"): a command prefix.
HostPrefix = Callable[[str], list[str]]


def this_host(_name: str) -> list[str]:
    return []


@dataclass
class System:
    cluster: PrivatePostgres
    redis_url: str
    logs: Path
    settings: dict[str, str]  # RATCHET_* for every process
    lane: str = "campaign"
    host_prefix: HostPrefix = this_host
    port: int = field(default_factory=free_port)
    web: subprocess.Popen | None = None
    workers: list[subprocess.Popen] = field(default_factory=list)
    others: list[subprocess.Popen] = field(default_factory=list)  # the sweeper, the dead
    started: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def environment(self) -> dict[str, str]:
        return {
            **os.environ,
            "DATABASE_URL": self.cluster.url,
            "REDIS_URL": self.redis_url,
            "SECRET_KEY": SECRET_KEY,
            "PUBLIC_BASE_URL": self.url,
            "PYTHONFAULTHANDLER": "1",
            **self.settings,
        }

    def _spawn(self, name: str, command: list[str]) -> subprocess.Popen:
        with (self.logs / f"{name}.log").open("w") as log:
            return subprocess.Popen(
                [*self.host_prefix(name), *command],
                cwd=ROOT,
                env=self.environment(),
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,
                start_new_session=True,
            )

    def start_web(self, workers: int = 2) -> None:
        """Gunicorn, as `make run` and a deployment serve the app; back once it answers."""
        command = [sys.executable, "-m", "gunicorn", "--workers", str(workers)]
        command += ["--no-control-socket", "--bind", f"127.0.0.1:{self.port}", "wsgi:app"]
        self.web = self._spawn("web", command)
        deadline = time.monotonic() + 60
        with httpx.Client(timeout=2) as client:
            while True:
                try:
                    if client.get(f"{self.url}/healthz").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                if self.web.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError((self.logs / "web.log").read_text())
                time.sleep(0.1)

    def flask(self, name: str, *args: str) -> subprocess.Popen:
        return self._spawn(name, [sys.executable, "-m", "flask", "--app", "wsgi", *args])

    def start_workers(self, count: int) -> None:
        for _ in range(count):
            self.workers.append(self._worker())

    def _worker(self) -> subprocess.Popen:
        self.started += 1
        return self.flask(f"worker{self.started}", "worker", "--lane", self.lane)

    def replace_worker(self, index: int) -> None:
        """Start a worker in the place of one that died (its log kept)."""
        self.others.append(self.workers[index])
        self.workers[index] = self._worker()

    def start_sweeper(self) -> None:
        self.others.append(self.flask("sweeper", "sweep"))

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """The operator's command line (`flask --app wsgi ...`), as they would type it."""
        command = [*self.host_prefix("cli"), sys.executable, "-m", "flask", "--app", "wsgi"]
        return subprocess.run(
            [*command, *args],
            cwd=ROOT,
            env=self.environment(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def stop(self) -> None:
        stop_all([*self.workers, *self.others, *([self.web] if self.web else [])])

    def tracebacks(self) -> list[str]:
        """The processes whose logs hold a traceback (a crash, not a handled fault)."""
        return sorted(
            path.stem for path in self.logs.glob("*.log") if "Traceback" in path.read_text()
        )
