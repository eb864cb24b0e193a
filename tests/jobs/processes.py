"""Ratchet processes a test starts for real (`flask --app wsgi ...`, each in its own process
group, logging to a file, and killed with pytest if pytest is), the environment a worker
process gets, stopping them all, and a look at whether one is stopped (SIGSTOP).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from ..conftest import PG_URL, SECRET_KEY
from .conftest import Env

ROOT = Path(__file__).resolve().parents[2]
PR_SET_PDEATHSIG = 1


def start(
    name: str, args: list[str], env: dict[str, str], logs: Path, prefix: Sequence[str] = ()
) -> subprocess.Popen:
    """`prefix` goes before the command: one that runs it elsewhere and then is it
    (`ip netns exec NAME`, which execs in place, so the process is still this one)."""
    with (logs / f"{name}.log").open("w") as log:  # the child keeps its own descriptor
        return subprocess.Popen(
            [*prefix, sys.executable, "-m", "flask", "--app", "wsgi", *args],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
            start_new_session=True,  # its own process group: RQ's scheduler child goes too
        )


def die_with_parent() -> None:
    """If pytest itself is killed, take the workers with it (Linux's PR_SET_PDEATHSIG), so
    no stray worker consumes a later run's queue."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def is_stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "T"


def worker_env(env: Env, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": PG_URL,
        "REDIS_URL": env.config.redis_url,
        "SECRET_KEY": SECRET_KEY,
        "PUBLIC_BASE_URL": env.base_url,
        "PYTHONFAULTHANDLER": "1",
        "RATCHET_SHARD_RATE": str(env.config.shard_rate),
        "RATCHET_SHARD_MAX": str(env.config.shard_max),
        **extra,
    }


def stop_all(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            # Its threads' stacks go to its log (PYTHONFAULTHANDLER), then it is killed.
            warnings.warn(f"{process.args} did not stop on SIGTERM in 20 s", stacklevel=2)
            process.send_signal(signal.SIGABRT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)
            process.kill()
            process.wait()
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
