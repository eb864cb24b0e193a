"""A worker raises its soft limit of open files to the hard one (`jobs/worker.py`): it keeps
a socket for each provider call in flight, up to twice `RATCHET_DRAIN_CONCURRENCY`."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

REPORT = """
import resource
from jobs.worker import raise_open_files
print(raise_open_files(), resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


def _limited(soft: int) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_worker_started_under_a_low_soft_limit_raises_it_to_the_hard_limit() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    wanted = 65536 if hard == resource.RLIM_INFINITY else hard
    assert wanted > 256  # else there is nothing to raise on this machine
    done = subprocess.run(
        [sys.executable, "-c", REPORT],
        cwd=ROOT,
        preexec_fn=lambda: _limited(256),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.split() == [str(wanted), str(wanted)], done.stderr
