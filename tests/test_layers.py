"""The house's walls, read from the source (docs/layout.md, STYLE's "the walls"): every
module in `app/` and `jobs/` fits in a head, their imports form no circle, and the arrows
between the layers point one way. In `tests/`, a test module imports no other test module:
what tests share lives in support modules (not named `test_*`).

Imports are read with `ast`, every one of them, those inside functions too: an import
made late to dodge a circle is still a circle.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("app", "jobs")
MAX_LINES = 400

# What the repo layer may never import: the layers above it.
ABOVE_REPO = ("app.reconcile", "app.views", "jobs")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    """Every module of `app/` and `jobs/`, by dotted name."""
    return {
        module_name(path): path
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    }


def import_base(node: ast.ImportFrom, package: str) -> str:
    """The module a `from ... import` reads from, a relative one resolved in `package`."""
    if not node.level:
        return node.module or ""
    parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
    return ".".join([*parts, node.module] if node.module else parts)


def imported_by(name: str, path: Path) -> set[str]:
    """The modules of ours that `name` imports (`from app import x` names `app.x` when x is
    a module, else the package `app` itself)."""
    known = modules()
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = import_base(node, package)
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    found.add(f"{base}.{alias.name}")
                elif base in known:
                    found.add(base)
    found.discard(name)
    return found


@cache
def import_graph() -> dict[str, frozenset[str]]:
    return {name: frozenset(imported_by(name, path)) for name, path in modules().items()}


def find_circle(graph: dict[str, frozenset[str]]) -> list[str] | None:
    """One import circle (its modules in order, the first repeated at the end), or None."""
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path: list[str] = [start]
        on_path = {start}
        # Depth first, with an explicit stack of (module, its remaining imports).
        stack = [(start, iter(sorted(graph[start])))]
        while stack:
            node, pending = stack[-1]
            step = next(pending, None)
            if step is None:
                stack.pop()
                path.pop()
                on_path.discard(node)
                done.add(node)
                continue
            if step in on_path:
                return [*path[path.index(step) :], step]
            if step not in done:
                path.append(step)
                on_path.add(step)
                stack.append((step, iter(sorted(graph[step]))))
    return None


def test_it_finds_a_circle_when_there_is_one() -> None:
    graph = {
        "a": frozenset({"b"}),
        "b": frozenset({"c"}),
        "c": frozenset({"a"}),
        "d": frozenset({"a"}),
    }
    assert find_circle(graph) == ["a", "b", "c", "a"]
    assert find_circle({"a": frozenset({"b"}), "b": frozenset()}) is None


def test_it_reads_absolute_relative_and_late_imports() -> None:
    assert "app.lifecycle" in import_graph()["app.repo.transitions"]
    # `from app import instruments` names the module, not the package's `create_app`.
    assert "app.instruments" in import_graph()["app.late_statuses"]
    assert "app" not in import_graph()["app.late_statuses"]
    # An import inside a function counts (provider_may_hold asks holds.py late).
    assert "app.repo.holds" in import_graph()["app.repo.requeues"]


def test_no_import_circle_in_app_or_jobs() -> None:
    circle = find_circle(import_graph())
    assert circle is None, "import circle: " + " -> ".join(circle or [])


def test_the_repo_layer_imports_no_reconciler_view_or_job() -> None:
    upward = {
        name: sorted(
            target
            for target in targets
            if any(target == above or target.startswith(above + ".") for above in ABOVE_REPO)
        )
        for name, targets in import_graph().items()
        if name.startswith("app.repo.")
    }
    assert {name: targets for name, targets in upward.items() if targets} == {}


def test_below_the_views_nothing_imports_them() -> None:
    """The views sit on top: only they and the app factory (`app/__init__.py`, which
    registers their blueprints) import `app.views`. What a view shares with a module below
    it lives below."""
    upward = {
        name: sorted(
            target for target in targets if target == "app.views" or target.startswith("app.views.")
        )
        for name, targets in import_graph().items()
        if name not in ("app", "app.views") and not name.startswith("app.views.")
    }
    assert {name: targets for name, targets in upward.items() if targets} == {}


def test_the_state_machine_imports_nothing_of_ours() -> None:
    assert import_graph()["app.lifecycle"] == frozenset()


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_is_over_400_lines(package: str) -> None:
    too_long = {
        name: lines
        for name, path in modules().items()
        if name.split(".")[0] == package
        and (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert too_long == {}, f"split these along their seams (at most {MAX_LINES} lines)"


def test_no_test_module_is_over_400_lines() -> None:
    too_long = {
        str(path.relative_to(ROOT)): lines
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert too_long == {}, f"split these along their seams (at most {MAX_LINES} lines)"


def names_imported(tree: ast.AST, package: str) -> set[str]:
    """Every dotted name an import in `tree` may mean, read in `package`: `from .x import y`
    gives both `package.x` and `package.x.y` (y may be a module or a name in x)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = import_base(node, package)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def is_test_module(dotted: str) -> bool:
    """A `test_*` module of the suite (pytest runs it; nothing imports it)."""
    target = ROOT.joinpath(*dotted.split("."))
    return (
        dotted.startswith("tests.")
        and dotted.rpartition(".")[2].startswith("test_")
        and (target.with_suffix(".py").is_file() or (target / "__init__.py").is_file())
    )


def borrowed_from_test_modules(path: Path) -> set[str]:
    """The other `test_*` modules that the module at `path` (under `tests/`) imports."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), filename=str(path))
    return {found for found in names_imported(tree, package) if is_test_module(found)} - {name}


def test_it_reads_a_test_module_imported_however_it_is_written() -> None:
    source = (
        "from . import test_api as api\n"
        "from ..test_layers import ROOT\n"
        "from tests.jobs.test_chaos import start\n"
        "import tests.views.test_webhooks_whatsapp\n"
        "from .dashboard_world import client_for\n"
        "def late():\n    from .test_api_limits import post\n"
    )
    found = {
        name for name in names_imported(ast.parse(source), "tests.views") if is_test_module(name)
    }
    assert found == {
        "tests.views.test_api",
        "tests.test_layers",
        "tests.jobs.test_chaos",
        "tests.views.test_webhooks_whatsapp",
        "tests.views.test_api_limits",
    }


def test_no_test_module_imports_another() -> None:
    """What two test modules share lives in a support module both import (`tests/parallel.py`,
    `tests/views/dashboard_world.py`): a test module is run by pytest, never imported."""
    borrowed = {
        module_name(path): sorted(found)
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if (found := borrowed_from_test_modules(path))
    }
    assert borrowed == {}, "move what these share into a support module (not named test_*)"
