"""Processes whose wall clocks are wrong: Debian's libfaketime, preloaded into a child.

`FAKETIME="+30s"` moves everything the process reads from the wall clock (`time.time()`,
`datetime.now()`) 30 s ahead; `FAKETIME_DONT_FAKE_MONOTONIC` leaves its monotonic clock
alone, as a machine whose wall clock is off still measures durations right. The library
is the package's thread-safe build: a worker runs its calls on threads.

`make test` installs the package where it is missing (`scripts/ensure-faketime`); where it
cannot be, the tests that need it are skipped and say why.
"""

from __future__ import annotations

import glob
from collections.abc import Mapping
from pathlib import Path

import pytest

LIBRARY_GLOB = "/usr/lib/*/faketime/libfaketimeMT.so.1"
# Its `sitecustomize` works around the library's one bug these children meet (`time.sleep`).
SITE = Path(__file__).resolve().parent / "faketime_site"


def library() -> str | None:
    found = sorted(glob.glob(LIBRARY_GLOB))
    return found[0] if found else None


def require_faketime() -> str:
    """The library's path, or the test is skipped with the reason."""
    path = library()
    if path is None:
        pytest.skip(
            "libfaketime is not installed (Debian's faketime package, which "
            "scripts/ensure-faketime installs): the clock-skew tests need it"
        )
    return path


def skewed(environ: Mapping[str, str], offset: str) -> dict[str, str]:
    """`environ` for a child whose wall clock is off by `offset` ("+30s", "-30s")."""
    path = require_faketime()
    preload = " ".join(part for part in (path, environ.get("LD_PRELOAD", "")) if part)
    python_path = ":".join(part for part in (str(SITE), environ.get("PYTHONPATH", "")) if part)
    return {
        **environ,
        "LD_PRELOAD": preload,
        "PYTHONPATH": python_path,
        "FAKETIME": offset,
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
