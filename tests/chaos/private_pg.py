"""A PostgreSQL cluster of a fault run's own: `initdb` into a fresh directory, served on a
free port of 127.0.0.1 with trust authentication, migrated to Ratchet's schema, and
restarted or stopped at will (fast or immediate) without disturbing anyone else's
database. Always stopped and removed at the end (`private_postgres`).

The server runs as the `postgres` user (it refuses to run as root): when the tests run as
root, every command goes through `runuser`, and the data directory is made for that user
in a directory it can reach (pytest's own temporary directories are closed to it).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Literal

import psycopg
import pytest

from app import migrate
from app.db import build_engine

from ..conftest import free_port

Mode = Literal["fast", "immediate"]
SERVER_USER = "postgres"
DATABASE = "ratchet"


class PrivatePostgres:
    def __init__(self, directory: Path, port: int, bin_dir: Path, as_user: list[str]) -> None:
        self.directory = directory
        self.data = directory / "data"
        self.log = directory / "server.log"
        self.port = port
        self.bin_dir = bin_dir
        self.as_user = as_user  # the prefix that runs a command as the server's user
        self.restarts = 0

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://{SERVER_USER}@127.0.0.1:{self.port}/{DATABASE}"

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user={SERVER_USER} dbname={DATABASE}"

    def _run(self, *args: str, timeout: float = 60) -> None:
        command = [*self.as_user, *args]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: {done.stdout}{done.stderr}")

    def create(self) -> None:
        self._run(
            str(self.bin_dir / "initdb"),
            "--pgdata",
            str(self.data),
            "--username",
            SERVER_USER,
            "--auth",
            "trust",
            "--encoding",
            "UTF8",
            "--no-instructions",
        )
        options = [
            f"port = {self.port}",
            "listen_addresses = '127.0.0.1'",
            f"unix_socket_directories = '{self.directory}'",
            "max_connections = 200",
            # A test cluster: the machine does not crash under it, only the server does.
            "fsync = off",
            "full_page_writes = off",
        ]
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write("\n".join(options) + "\n")
        self.start()
        with psycopg.connect(self._dsn_of("postgres"), autocommit=True) as connection:
            connection.execute(f"CREATE DATABASE {DATABASE}")
        engine = build_engine(self.url)
        try:
            migrate.upgrade(engine)
        finally:
            engine.dispose()

    def _dsn_of(self, database: str) -> str:
        return f"host=127.0.0.1 port={self.port} user={SERVER_USER} dbname={database}"

    def start(self) -> None:
        self._run(
            str(self.bin_dir / "pg_ctl"),
            "start",
            "--pgdata",
            str(self.data),
            "--log",
            str(self.log),
            "--wait",
            "--timeout",
            "60",
        )
        self.wait_ready()

    def stop(self, mode: Mode = "fast") -> None:
        self._run(
            str(self.bin_dir / "pg_ctl"),
            "stop",
            "--pgdata",
            str(self.data),
            "--mode",
            mode,
            "--wait",
            "--timeout",
            "60",
        )

    def restart(self, mode: Mode = "fast") -> float:
        """Stop (every connection is cut; immediate: no shutdown checkpoint, so the start
        replays the WAL) and start again; the seconds it was down."""
        began = time.monotonic()
        self.stop(mode)
        self.start()
        self.restarts += 1
        return time.monotonic() - began

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def wait_ready(self, limit: float = 30.0) -> None:
        deadline = time.monotonic() + limit
        while True:
            try:
                with psycopg.connect(self._dsn_of("postgres"), connect_timeout=2) as connection:
                    connection.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def remove(self) -> None:
        if self.running():
            with suppress(RuntimeError, subprocess.TimeoutExpired):
                self.stop("immediate")
        shutil.rmtree(self.directory, ignore_errors=True)


def _tools() -> tuple[Path, list[str]] | str:
    """Where initdb and pg_ctl are, and how to run them as the server's user; or why not."""
    initdb = shutil.which("initdb")
    if initdb is None or shutil.which("pg_ctl") is None:
        return "initdb and pg_ctl are not on PATH"
    bin_dir = Path(initdb).resolve().parent
    if os.geteuid() != 0:
        return bin_dir, []
    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        return f"running as root with no `{SERVER_USER}` user to run the server as"
    runuser = shutil.which("runuser")
    if runuser is None:
        return "running as root with no `runuser` to run the server as another user"
    return bin_dir, [runuser, "-u", SERVER_USER, "--"]


@contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """A migrated cluster of this run's own, removed at the end; skips the test (saying
    why) when one cannot be made here."""
    tools = _tools()
    if isinstance(tools, str):
        pytest.skip(f"no private PostgreSQL cluster for the fault run: {tools}")
    bin_dir, as_user = tools
    directory = Path(tempfile.mkdtemp(prefix="ratchet-pg-"))
    if as_user:
        server = pwd.getpwnam(SERVER_USER)
        os.chown(directory, server.pw_uid, server.pw_gid)
    directory.chmod(0o700)
    cluster = PrivatePostgres(directory, free_port(), bin_dir, as_user)
    try:
        try:
            cluster.create()
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            pytest.skip(f"no private PostgreSQL cluster for the fault run: {exc}")
        yield cluster
    finally:
        cluster.remove()


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    with private_postgres() as cluster:
        yield cluster
