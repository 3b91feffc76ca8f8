"""tests/required.py: a missing package skips its tests, and fails them under make test's settings;
no test module skips on a missing package by itself."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.required import need, required

ROOT = Path(__file__).resolve().parents[2]
ABSENT = "skillgraft_no_such_package"


def clear(monkeypatch):
    for name in [n for n in os.environ if n.startswith("SKILLGRAFT_REQUIRE_")]:
        monkeypatch.delenv(name)


def test_a_missing_package_skips_where_nothing_is_required(monkeypatch):
    clear(monkeypatch)
    assert not required()
    with pytest.raises(pytest.skip.Exception, match=f"{ABSENT} is not installed .*skillgraft\\[dev\\]"):
        need(ABSENT, "skillgraft[dev]")
    assert need("json", "none").dumps([]) == "[]"


@pytest.mark.parametrize("variable", ["SKILLGRAFT_REQUIRE_SERVER", "SKILLGRAFT_REQUIRE_BROWSER", "SKILLGRAFT_REQUIRE_X"])
def test_a_missing_package_fails_under_any_require_variable(monkeypatch, variable):
    clear(monkeypatch)
    monkeypatch.setenv(variable, "1")
    assert required()
    with pytest.raises(pytest.fail.Exception, match=ABSENT):
        need(ABSENT, "skillgraft[dev]")


def test_no_test_module_skips_a_missing_package_by_itself():
    """Every package check goes through tests/required.py, which fails under make test."""
    call = "pytest." + "importorskip("
    folders = [ROOT / "tests", ROOT / "adapters" / "langchain" / "tests"]
    found = [str(p.relative_to(ROOT)) for folder in folders for p in folder.rglob("*.py") if call in p.read_text(encoding="utf-8")]
    assert not found, f"use tests.required.need instead of importorskip in {found}"
