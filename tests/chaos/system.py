"""The whole system as separate processes for a fault run: the web under gunicorn, workers
on a lane, the sweeper, and the operator's CLI, all on the run's own PostgreSQL cluster
and Redis database; the sandbox is the suite's own process.

Where a process runs is a host's business. With no `network`, all of them run on this
machine's own network. With one (tests/chaos/hosts.py: network namespaces, each with an
address of its own, reaching PostgreSQL, Redis and the sandbox over its veth link), every
host runs a web, worker slot n runs on host n mod hosts (a worker started in a killed
one's place too), and the sweeper and the operator's CLI run on the first; each process
gets the run's URLs as its host reaches them. Everything else here is the same.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from ..conftest import SECRET_KEY, free_port
from ..jobs.processes import ROOT, die_with_parent, stop_all
from .hosts import Host, Network
from .private_pg import PrivatePostgres


@dataclass
class System:
    cluster: PrivatePostgres
    redis_url: str
    logs: Path
    settings: dict[str, str]  # RATCHET_* for every process
    lane: str = "campaign"
    network: Network | None = None
    port: int = field(default_factory=free_port)
    webs: list[subprocess.Popen] = field(default_factory=list)
    workers: list[subprocess.Popen] = field(default_factory=list)
    others: list[subprocess.Popen] = field(default_factory=list)  # the sweeper, the dead
    started: int = 0

    @property
    def url(self) -> str:
        """The web the sandbox's webhooks reach (the first host's, on hosts)."""
        return self.urls[0]

    @property
    def urls(self) -> list[str]:
        """Every web: one per host."""
        if self.network is None:
            return [f"http://127.0.0.1:{self.port}"]
        return [host.web_url for host in self.network]

    @property
    def hosts(self) -> int:
        return len(self.network) if self.network is not None else 0

    def host(self, slot: int = 0) -> Host | None:
        return self.network[slot % len(self.network)] if self.network is not None else None

    def environment(self, host: Host | None = None) -> dict[str, str]:
        base = {
            **os.environ,
            "DATABASE_URL": self.cluster.url,
            "REDIS_URL": self.redis_url,
            "SECRET_KEY": SECRET_KEY,
            "PUBLIC_BASE_URL": self.url,
            "PYTHONFAULTHANDLER": "1",
            **self.settings,
        }
        return host.environ(base) if host is not None else base

    def _spawn(self, name: str, command: list[str], host: Host | None) -> subprocess.Popen:
        if host is not None:
            name = f"host{host.index}-{name}"
        with (self.logs / f"{name}.log").open("w") as log:
            return subprocess.Popen(
                [*(host.prefix if host is not None else []), *command],
                cwd=ROOT,
                env=self.environment(host),
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,
                start_new_session=True,
            )

    def start_web(self, workers: int = 2) -> None:
        """Gunicorn, as `make run` and a deployment serve the app, on each host (or here);
        back once every one answers."""
        for slot, url in enumerate(self.urls):
            command = [sys.executable, "-m", "gunicorn", "--workers", str(workers)]
            bind = url.removeprefix("http://")
            command += ["--no-control-socket", "--bind", bind, "wsgi:app"]
            web = self._spawn("web", command, self.host(slot))
            self.webs.append(web)
            self._answering(url, web)

    def _answering(self, url: str, web: subprocess.Popen) -> None:
        deadline = time.monotonic() + 60
        with httpx.Client(timeout=2) as client:
            while True:
                try:
                    if client.get(f"{url}/healthz").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                if web.poll() is not None or time.monotonic() > deadline:
                    logs = [p.read_text() for p in self.logs.glob("*web.log")]
                    raise RuntimeError(f"no web at {url}:\n" + "\n".join(logs))
                time.sleep(0.1)

    def flask(self, name: str, *args: str, host: Host | None = None) -> subprocess.Popen:
        command = [sys.executable, "-m", "flask", "--app", "wsgi", *args]
        return self._spawn(name, command, host)

    def start_workers(self, count: int) -> None:
        for slot in range(count):
            self.workers.append(self._worker(slot))

    def _worker(self, slot: int) -> subprocess.Popen:
        self.started += 1
        host = self.host(slot)
        return self.flask(f"worker{self.started}", "worker", "--lane", self.lane, host=host)

    def replace_worker(self, index: int) -> None:
        """Start a worker in the place of one that died (its log kept), on its host."""
        self.others.append(self.workers[index])
        self.workers[index] = self._worker(index)

    def start_sweeper(self) -> None:
        self.others.append(self.flask("sweeper", "sweep", host=self.host()))

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """The operator's command line (`flask --app wsgi ...`), as they would type it (on
        the first host)."""
        host = self.host()
        command = [*(host.prefix if host else []), sys.executable, "-m", "flask", "--app", "wsgi"]
        return subprocess.run(
            [*command, *args],
            cwd=ROOT,
            env=self.environment(host),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def stop(self) -> None:
        stop_all([*self.workers, *self.others, *self.webs])

    def tracebacks(self) -> list[str]:
        """The processes whose logs hold a traceback (a crash, not a handled fault)."""
        return sorted(
            path.stem for path in self.logs.glob("*.log") if "Traceback" in path.read_text()
        )
