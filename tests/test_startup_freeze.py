"""Every long-running process leaves its start-up objects out of later garbage collections
(`app/startup.py`): a full collection's pause stalled every reply in flight."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .conftest import PG_URL, REDIS_URL, SECRET_KEY

ROOT = Path(__file__).resolve().parents[1]

# Far fewer than start-up builds (about 150,000 in a worker), far more than a few stray ones.
STARTUP_OBJECTS = 20_000


def run_python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={
            **os.environ,
            "DATABASE_URL": PG_URL,
            "REDIS_URL": REDIS_URL,
            "SECRET_KEY": SECRET_KEY,
            "PUBLIC_BASE_URL": "http://127.0.0.1:9",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_the_entry_point_every_process_imports_freezes_what_start_up_built() -> None:
    frozen = run_python("import gc, wsgi; print(gc.get_freeze_count())")
    assert int(frozen) > STARTUP_OBJECTS


def test_a_worker_freezes_what_it_built_before_its_first_job(redis_url: str) -> None:
    """After its own imports (RQ's worker, the queues), so those stay out of it too. The
    entry point's freeze is undone first: only the worker's own can pass."""
    frozen = run_python(
        "import gc, wsgi\n"
        "gc.unfreeze()\n"
        "from jobs.worker import run_worker\n"
        "with wsgi.app.app_context():\n"
        "    run_worker('reply', burst=True)\n"
        "print(gc.get_freeze_count())\n"
    )
    assert int(frozen) > STARTUP_OBJECTS
