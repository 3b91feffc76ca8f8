"""The LangChain example runs as a script, takes all three decisions and answers a near miss plainly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from skillgraft.core.gate import repeats_answer

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "langchain_agent.py"


def test_example_runs_and_takes_every_decision():
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    run = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=600, env=env, stdin=subprocess.DEVNULL
    )
    assert run.returncode == 0, run.stderr[-2000:]
    for decision in ("exact", "graft", "abstain"):
        assert f"decision={decision}" in run.stdout
    assert "A: 391" in run.stdout
    near_miss = run.stdout.split("Q: What is 17 * 24?")[1]
    assert "decision=fallback" in near_miss and "near miss" in near_miss
    assert not repeats_answer(near_miss.split("A: ", 1)[1], "391")
