"""Where network namespaces cannot be made, the fault run goes on this machine's network
alone and its report says so and why: it never reads as a run on hosts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from . import run
from .faults import Plan


def placement_of(monkeypatch: pytest.MonkeyPatch, wanted: int, missing: str | None) -> Any:
    seen: dict[str, Any] = {}

    def fake_run(*args: Any) -> str:
        seen["network"], seen["placement"] = args[5], args[6]
        return "outcome"

    monkeypatch.setattr(run, "namespaces_missing", lambda: missing)
    monkeypatch.setattr(run, "_run", fake_run)
    cluster: Any = None  # never reached: `_run` is the fake
    outcome: Any = run.chaos_run(Plan(10, 1), cluster, "", "", Path("."), wanted)
    assert outcome == "outcome"
    return seen


def test_a_run_that_cannot_make_namespaces_goes_on_without_hosts_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = placement_of(monkeypatch, 2, "not root: several hosts are network namespaces")
    assert seen["network"] is None
    assert seen["placement"].startswith("hosts 0: every process on this machine's network")
    assert "2 wanted, but not root" in seen["placement"]


def test_a_run_asked_for_no_hosts_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = placement_of(monkeypatch, 0, "never asked")
    assert seen["network"] is None
    assert seen["placement"] == "hosts 0: every process on this machine's network"
