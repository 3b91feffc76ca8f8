"""Each example agent's quick run: it runs on the embedded model and prints what the memory bought."""

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
        [sys.executable, str(ROOT / "examples" / f"{name}.py"), "--quick"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, f"{name} exited {result.returncode}:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result.stdout


def figures(pattern: str, out: str) -> tuple:
    found = re.search(pattern, out)
    assert found, f"no line matching {pattern!r} in:\n{out[-3000:]}"
    return found.groups()


@pytest.mark.sandbox
def test_math_flywheel():
    out = run_example("math_flywheel")
    passed, n, tokens = figures(r"first pass \(.*\): pass rate (\d+)/(\d+), decoded tokens (\d+)", out)
    assert int(n) >= 2 and int(passed) == int(n), "every first-pass answer is verified (the solver backs the model)"
    again, n2, tokens2 = figures(r"second pass \(.*\): pass rate (\d+)/(\d+), decoded tokens (\d+)", out)
    assert (again, n2) == (passed, n), "the second pass answers every question from the memory, correctly"
    assert int(tokens2) < int(tokens), "the second pass decodes less than the first"
    exact, n3 = figures(r"exact hits: (\d+)/(\d+)", out)
    assert exact == n3
    assert "python verifier ran the method" in out


def test_langchain_skills_agent():
    out = run_example("langchain_skills_agent")
    (decisions,) = figures(r"questions: \d+, decisions: (.+)", out)
    assert "graft" in decisions.split(", ") and "abstain" in decisions.split(", ")
    (placed,) = figures(r"skills placed: (.+)", out)
    assert placed != "none"
    memory_tokens, plain_tokens = (int(x) for x in figures(r"prompt tokens prefilled: memory (\d+), routing off (\d+)", out))
    assert 0 < memory_tokens < plain_tokens, "a skill used again is restored, not prefilled again"
    seconds = [float(x) for x in figures(r"time to answer: memory ([\d.]+) s, routing off ([\d.]+) s", out)]
    assert all(s > 0 for s in seconds)


@pytest.mark.server
def test_team_assistant():
    out = run_example("team_assistant")
    for team in ("platform", "data"):
        (placed,) = figures(rf"team {team}: \d+ requests, skills placed: (.+)", out)
        assert placed != "none", f"no skill was placed for team {team}"
    assert "terraform-plan-review" not in figures(r"team data: \d+ requests, skills placed: (.+)", out)[0], \
        "a team never gets another team's skill"
    (requests,) = figures(r"requests: (\d+)", out)
    assert int(requests) >= 4
    gateway_s, plain_s = (float(x) for x in figures(r"time to answer: gateway ([\d.]+) s, plain llama-server ([\d.]+) s", out))
    assert gateway_s > 0 and plain_s > 0
    gateway_pre, plain_pre = (int(x) for x in figures(r"prompt tokens prefilled: gateway (\d+), plain llama-server (\d+)", out))
    assert 0 < gateway_pre < plain_pre, "the gateway restores each team's prefix and skills instead of prefilling them"
