"""The package's layers: who may import whom."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "skillgraft"


def imported_modules(path: Path) -> set[str]:
    """The ``skillgraft`` modules ``path`` imports anywhere (at load or inside a function)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 1:
            found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize("module", ["memory", "verifiers", "gate", "states", "sampling", "chat_layout", "blocks"])
def test_the_memory_and_what_it_builds_on_never_call_back_into_the_flywheel(module):
    assert "flywheel" not in imported_modules(PACKAGE / f"{module}.py")


@pytest.mark.parametrize("module", ["states", "sampling", "protocols", "testing", "chat_layout", "verifiers"])
def test_what_engines_and_fakes_share_loads_no_engine(module):
    assert not {"engine", "engine_native", "engine_state", "engine_text"} & imported_modules(PACKAGE / f"{module}.py")
