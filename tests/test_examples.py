"""Smoke tests: each example agent runs on the embedded model and says what it did."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.slow, pytest.mark.model]


def run_example(name: str) -> str:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("SKILLGRAFT_HOME", None)
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / f"{name}.py")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, f"{name} exited {result.returncode}:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result.stdout


@pytest.mark.sandbox
def test_math_flywheel():
    out = run_example("math_flywheel")
    assert "exact hits: 5/5, decoded tokens on the second pass: 0" in out
    assert "python verifier ran the method" in out


def test_skill_manual_agent():
    out = run_example("skill_manual_agent")
    assert "abstained on the out-of-domain question: True" in out
    assert "decision  graft" in out


def test_long_document_memory():
    out = run_example("long_document_memory")
    found = re.search(r"needles found: (\d+)/(\d+) \(routed to the right section: (\d+)/(\d+)\)", out)
    assert found, out[-2000:]
    assert found.group(3) == found.group(4), "a needle question was routed to the wrong section"
    ratio = re.search(r"total tokens stored [\d,]+ vs n_ctx 2,048 \((\d+\.\d)x\)", out)
    assert ratio and float(ratio.group(1)) > 1, "the store should hold more tokens than the context"
