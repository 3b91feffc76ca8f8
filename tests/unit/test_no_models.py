"""The fast suite needs no model package: llama.cpp, torch and sentence-transformers stay unloaded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .conftest import HEAVY_MODULES

ROOT = Path(__file__).resolve().parents[2]

# Run with these packages made unimportable, as if they were not installed.
PROBE = f"""
import importlib, importlib.abc, sys
HEAVY = {HEAVY_MODULES!r}

class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == h or name.startswith(h + ".") for h in HEAVY):
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked)", name=name)
        return None

sys.meta_path.insert(0, Absent())
import tempfile
from pathlib import Path
from click.testing import CliRunner
from skillgraft.cli.main import cli
from skillgraft.memory import SkillMemory
from skillgraft.testing import FakeEmbedder, FakeEngine

for path in sorted(Path("tests/unit").glob("*.py")):
    importlib.import_module("tests.unit." + path.stem)
for command in ["--help", *[[name, "--help"] for name in cli.commands]]:
    assert CliRunner().invoke(cli, command).exit_code == 0, command
with tempfile.TemporaryDirectory() as home:
    engine = FakeEngine(reply=lambda prompt: "Use rebase." if "squash" in prompt else "No idea.")
    with SkillMemory(home, engine=engine, embedder=FakeEmbedder()) as memory:
        memory.add_manual("git", "Squash commits with git rebase -i.", examples=["squash my commits"])
        memory.add_solution("What is 2 + 2?", "4", verifier="exact", expected="4")
        decisions = [memory.generate(q).decision for q in ("what is 2+2", "how do I squash commits", "who won in 1998")]
        assert decisions == ["exact", "graft", "abstain"], decisions
print(" ".join(sorted(m for m in sys.modules if any(m == h or m.startswith(h + ".") for h in HEAVY))))
"""


def test_the_fakes_memory_and_cli_run_with_the_model_packages_absent():
    result = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == []

