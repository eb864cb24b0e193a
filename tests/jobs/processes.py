"""Ratchet processes a test starts for real (`flask --app wsgi ...`, each in its own process
group, logging to a file, and killed with pytest if pytest is), and a look at whether one is
stopped (SIGSTOP).
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PR_SET_PDEATHSIG = 1


def start(name: str, args: list[str], env: dict[str, str], logs: Path) -> subprocess.Popen:
    with (logs / f"{name}.log").open("w") as log:  # the child keeps its own descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "flask", "--app", "wsgi", *args],
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
