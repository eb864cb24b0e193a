"""Several hosts on one machine (issue 35): network namespaces, each joined to this one by a
veth link, in which a test runs Ratchet's processes (web, workers, the sweeper) as if on
machines of their own, and whose links it can cut and heal.

PostgreSQL, Redis and the sandbox listen on this namespace's loopback only, and a host has
a loopback of its own; so each is forwarded from one private service address, the same on
every host's link (`Proxy`, tests/jobs/redis_proxy.py, which also counts what each host
sent through it). The hosts' web servers are reached at the hosts' own addresses.

    with hosts(3, logs=tmp_path, pg_url=PG_URL, redis_url=..., sandbox_url=...) as network:
        settings = network[0].environ(worker_env(env))
        network[0].start("worker", ["worker", "--lane", "campaign"], settings)
        network[2].cut()   # its link goes down: its connections hang, as on a pulled cable
        network[2].heal()

Addresses are a private block of 10/8 that nothing on this machine uses yet, with a route
in this namespace that refuses the whole block, so no packet meant for a host ever leaves
the machine (a cut host's address is then unreachable from here). Root and iproute2 are
needed: without them, `hosts` skips the test and says why. Every namespace, link and route
it made is deleted on the way out, whatever happened, and so are those of an earlier run
that was killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from ..faketime import skewed
from ..jobs.processes import ROOT, die_with_parent, start, stop_all
from ..jobs.redis_proxy import Proxy

WEB_PORT = 8000  # each host has ports of its own
UPLINK = "uplink"  # the link's name inside a host
NAMES = re.compile(r"^rtch(\d+)h(\d+)$")  # a namespace of ours: rtch<pid>h<n>
BLOCKED = re.compile(r"^unreachable (10\.\d+\.0\.0/16) metric (\d+)$")  # a block of ours
GUNICORN = [
    *(sys.executable, "-m", "gunicorn", "--workers", "1", "--threads", "4"),
    "--no-control-socket",  # each would take the one in the home directory
]


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


def namespaces_missing() -> str | None:
    """Why this process cannot make network namespaces (None: it can)."""
    if shutil.which("ip") is None:
        return "no `ip` command (Debian's iproute2): several hosts need it"
    if os.geteuid() != 0:
        return "not root: several hosts are network namespaces and veth links"
    probe = f"rtch{os.getpid()}probe"
    made = ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot make a network namespace (`ip netns add`): {made.stderr.strip()}"
    ip("netns", "del", probe, check=False)
    return None


def require_namespaces() -> None:
    """Skip, saying why, where this process cannot make network namespaces."""
    reason = namespaces_missing()
    if reason is not None:
        pytest.skip(reason)


@dataclass
class Host:
    """One namespace: its name, its address, the link's end in this namespace."""

    network: Network
    index: int
    namespace: str
    link: str
    address: str
    skew: str | None = None  # its wall clock's offset for what it starts ("+30s")
    processes: list[subprocess.Popen] = field(default_factory=list)
    up: bool = True

    @property
    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.namespace]

    @property
    def web_url(self) -> str:
        return f"http://{self.address}:{WEB_PORT}"

    def environ(self, base: Mapping[str, str]) -> dict[str, str]:
        """`base` (a worker's environment) with PostgreSQL and Redis reached from here, and
        this host's web server as the public URL; under its skew, if it has one."""
        settings = {
            **base,
            "DATABASE_URL": self.network.through("postgresql", base["DATABASE_URL"]),
            "REDIS_URL": self.network.through("redis", base["REDIS_URL"]),
            "PUBLIC_BASE_URL": self.web_url,
        }
        return skewed(settings, self.skew) if self.skew else settings

    def start(self, name: str, args: list[str], environ: dict[str, str]) -> subprocess.Popen:
        """`flask --app wsgi ARGS` inside this host, logging to `<host>-<name>.log`."""
        process = start(f"{self.namespace}-{name}", args, environ, self.network.logs, self.prefix)
        self.processes.append(process)
        return process

    def serve(self, environ: dict[str, str]) -> subprocess.Popen:
        """The web (gunicorn) on this host's address (`answering` waits for it)."""
        with (self.network.logs / f"{self.namespace}-web.log").open("w") as log:
            process = subprocess.Popen(
                [*self.prefix, *GUNICORN, "--bind", f"{self.address}:{WEB_PORT}", "wsgi:app"],
                cwd=ROOT,
                env=environ,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,
                start_new_session=True,
            )
        self.processes.append(process)
        return process

    def answering(self, limit: float = 60.0) -> None:
        """Wait until this host's web answers /healthz from here, over its link."""
        deadline = time.monotonic() + limit
        with httpx.Client(timeout=2) as client:
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if client.get(f"{self.web_url}/healthz").status_code == 200:
                        return
                assert time.monotonic() < deadline, f"no web on {self.namespace}: " + self.log(
                    "web"
                )
                time.sleep(0.1)

    def cut(self) -> None:
        """Its link goes down at this end: nothing passes either way. Its connections are
        not closed: they hang, and new ones wait for an answer that never comes, as for a
        machine whose cable was pulled somewhere between it and the rest."""
        ip("link", "set", self.link, "down")
        self.up = False

    def heal(self) -> None:
        """The link comes back up, with the route and neighbour entry that going down took."""
        ip("link", "set", self.link, "up")
        self.join()
        self.up = True

    def join(self) -> None:
        """This namespace's route to the host, and each end's hardware address fixed at the
        other: no ARP, so a cut is packets lost and nothing else (an ARP that fails makes a
        new connection fail at once instead of waiting, and lingers after the heal)."""
        ip("route", "replace", f"{self.address}/32", "dev", self.link)
        mine = hardware_address(self.link)
        theirs = hardware_address(UPLINK, self.namespace)
        ip("neigh", "replace", self.address, "lladdr", theirs, "dev", self.link, "nud", "permanent")
        service = self.network.service
        inside = ["-n", self.namespace, "neigh", "replace", service, "lladdr", mine]
        ip(*inside, "dev", UPLINK, "nud", "permanent")

    def sent(self, service: str) -> int:
        """Bytes this host sent to a service ("postgresql", "redis", "sandbox")."""
        return self.network.forwarded[service].sent[self.address]

    def log(self, name: str) -> str:
        return (self.network.logs / f"{self.namespace}-{name}.log").read_text()


@dataclass
class Network:
    """The hosts, the service address they reach this namespace at, and the forwarders."""

    logs: Path
    block: str  # "10.B": the block's first two octets
    hosts: list[Host] = field(default_factory=list)
    forwarded: dict[str, Proxy] = field(default_factory=dict)

    @property
    def service(self) -> str:
        return f"{self.block}.0.1"

    @property
    def sandbox_url(self) -> str:
        """The sandbox as a host reaches it (an identity's base URL is read by every host)."""
        return f"http://{self.service}:{self.forwarded['sandbox'].port}"

    def through(self, service: str, url: str) -> str:
        """`url` with its host and port those of the service's forwarder."""
        parts = urlsplit(url)
        credentials = parts.netloc.rpartition("@")[0]
        address = f"{self.service}:{self.forwarded[service].port}"
        netloc = f"{credentials}@{address}" if credentials else address
        return urlunsplit(parts._replace(netloc=netloc))

    def __getitem__(self, index: int) -> Host:
        return self.hosts[index]

    def __iter__(self) -> Iterator[Host]:
        return iter(self.hosts)

    def __len__(self) -> int:
        return len(self.hosts)

    def stop(self) -> None:
        """Every process the hosts started (SIGTERM, then SIGKILL for what outlives it)."""
        stop_all([p for host in self.hosts for p in host.processes])


def free_block() -> str:
    """A /16 of 10/8 that no address or route on this machine is in (picked from the pid,
    so that runs side by side take different ones)."""
    used = ip("-4", "addr").stdout + ip("-4", "route", "show", "table", "all").stdout
    for step in range(128):
        block = f"10.{64 + (os.getpid() + step) % 128}"
        if f" {block}." not in used:
            return block
    raise RuntimeError("no free 10.x.0.0/16 block on this machine")


def remove_stale() -> None:
    """Namespaces and routes an earlier run made and could not delete (it was killed): the
    namespaces are named, and the routes' metric is, after the pid of the run."""
    for line in ip("netns", "list").stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        found = NAMES.match(name)
        if found and not Path(f"/proc/{found.group(1)}").exists():
            ip("netns", "del", name, check=False)
    for line in ip("-4", "route", "show", "type", "unreachable").stdout.splitlines():
        found = BLOCKED.match(line.strip())
        if found and not Path(f"/proc/{found.group(2)}").exists():
            ip("route", "del", "unreachable", found.group(1), "metric", found.group(2))


def add_host(network: Network, index: int) -> Host:
    pid = os.getpid()
    host = Host(
        network,
        index,
        namespace=f"rtch{pid}h{index}",
        link=f"rtch{pid}l{index}",
        address=f"{network.block}.1.{index + 1}",
    )
    ip("netns", "add", host.namespace)
    network.hosts.append(host)  # from here on, teardown deletes it
    ip("link", "add", host.link, "type", "veth", "peer", "name", UPLINK, "netns", host.namespace)
    ip("addr", "add", f"{network.service}/32", "dev", host.link)
    ip("link", "set", host.link, "up")
    inside = ["-n", host.namespace]
    ip(*inside, "link", "set", "lo", "up")
    ip(*inside, "addr", "add", f"{host.address}/32", "dev", UPLINK)
    ip(*inside, "link", "set", UPLINK, "up")
    # Only the service address is reachable from a host: no default route, so nothing a
    # host does can reach past this machine.
    ip(*inside, "route", "add", f"{network.service}/32", "dev", UPLINK)
    host.join()
    return host


def hardware_address(link: str, namespace: str | None = None) -> str:
    where = ["-n", namespace] if namespace else []
    return json.loads(ip(*where, "-j", "link", "show", link).stdout)[0]["address"]


def forward(network: Network, service: str, url: str) -> None:
    parts = urlsplit(url)
    assert parts.port is not None, f"{service}: no port in its URL"
    network.forwarded[service] = Proxy(
        parts.port, listen_host=network.service, target_host=parts.hostname or "127.0.0.1"
    )


@contextlib.contextmanager
def hosts(
    count: int, *, logs: Path, pg_url: str, redis_url: str, sandbox_url: str | None = None
) -> Iterator[Network]:
    """`count` hosts reaching PostgreSQL, Redis and the sandbox (if given) at
    `network.service`.

    On the way out every process a host started is stopped, the forwarders closed, and the
    namespaces, links and the block's route deleted."""
    require_namespaces()
    remove_stale()
    network = Network(logs, free_block())
    blocked = ["unreachable", f"{network.block}.0.0/16", "metric", str(os.getpid())]
    try:
        ip("route", "add", *blocked)
        for index in range(count):
            add_host(network, index)
        forward(network, "postgresql", pg_url)
        forward(network, "redis", redis_url)
        if sandbox_url is not None:
            forward(network, "sandbox", sandbox_url)
        yield network
    finally:
        try:
            network.stop()
        finally:
            for proxy in network.forwarded.values():
                proxy.cut()
            for host in network.hosts:
                ip("netns", "del", host.namespace, check=False)
                ip("link", "del", host.link, check=False)  # gone with its peer, if it was
            ip("route", "del", *blocked, check=False)
