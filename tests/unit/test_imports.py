"""Importing the package and opening a store load no llama.cpp and no torch."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("llama_cpp", "torch", "sentence_transformers", "faiss")


def _loaded_after(code: str) -> list[str]:
    probe = f"{code}\nimport sys\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_import_skillgraft_is_light():
    assert _loaded_after("import skillgraft") == []


def test_opening_a_memory_loads_no_model(tmp_path):
    code = f"import skillgraft\nm = skillgraft.SkillMemory({str(tmp_path / 's')!r})\nm.list()\nm.close()"
    assert _loaded_after(code) == []
