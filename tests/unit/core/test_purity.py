"""scheduler/core is pure: no Django, no clock, no randomness, no I/O, no project apps (DESIGN §4)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[3] / "scheduler" / "core"
FORBIDDEN_MODULES = {
    "django", "rest_framework", "celery", "time", "random", "secrets", "os", "sys", "io", "pathlib", "socket",
    "subprocess", "threading", "asyncio", "logging", "uuid",
    "config", "budgets", "topology", "client", "scheduler.models", "scheduler.sim", "scheduler.api",
}
# Reads of the clock or of entropy through modules that are otherwise fine.
FORBIDDEN_CALLS = {("datetime", "now"), ("datetime", "utcnow"), ("datetime", "today"), ("date", "today")}
FORBIDDEN_BUILTINS = {"open", "input", "print", "exec", "eval", "__import__"}


def _modules() -> list[Path]:
    return sorted(CORE.glob("*.py"))


def _imported(tree: ast.AST) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.name)
def test_it_imports_nothing_impure(path: Path) -> None:
    for name in _imported(ast.parse(path.read_text())):
        root = name.split(".")[0]
        assert root not in FORBIDDEN_MODULES and name not in FORBIDDEN_MODULES, f"{path.name} imports {name}"
        assert not name.startswith("scheduler.") or name.startswith("scheduler.core"), f"{path.name} imports {name}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.name)
def test_it_reads_no_clock_and_does_no_io(path: Path) -> None:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            assert (node.value.id, node.attr) not in FORBIDDEN_CALLS, f"{path.name}:{node.lineno} reads the clock"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in FORBIDDEN_BUILTINS, f"{path.name}:{node.lineno} calls {node.func.id}()"


def test_the_checks_see_the_whole_core() -> None:
    assert {"engine.py", "model.py", "placement.py", "preemption.py"} <= {p.name for p in _modules()}
