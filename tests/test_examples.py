"""Each example agent's quick run: it runs on the embedded model and prints what the memory bought.

The examples are separate processes with their own temporary stores and ports: the module
starts every selected one at once (side by side on the machine's cores) and each test reads
its own example's output."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 600
EXAMPLE_OF_TEST = {"test_math_flywheel": "math_flywheel", "test_langchain_skills_agent": "langchain_skills_agent",
                   "test_team_assistant": "team_assistant"}

pytestmark = [pytest.mark.slow, pytest.mark.model]


class ExampleRun:
    """``examples/<name>.py --quick`` started in the background, its output in ``folder``."""

    def __init__(self, name: str, folder: Path) -> None:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        env.pop("SKILLGRAFT_HOME", None)
        self.name, self.out, self.err = name, folder / f"{name}.out", folder / f"{name}.err"
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.process = subprocess.Popen([sys.executable, str(ROOT / "examples" / f"{name}.py"), "--quick"], cwd=ROOT,
                                            env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                            start_new_session=True)

    def output(self) -> str:
        """Its stdout once it exited 0 (a failure with the end of both streams otherwise)."""
        code = self.process.wait(timeout=TIMEOUT_S)
        stdout, stderr = self.out.read_text(errors="replace"), self.err.read_text(errors="replace")
        assert code == 0, f"{self.name} exited {code}:\n{stdout[-4000:]}\n{stderr[-4000:]}"
        return stdout

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def examples(request, tmp_path_factory):
    """The runs of the examples whose tests were selected, all started now."""
    folder = tmp_path_factory.mktemp("examples")
    selected = {EXAMPLE_OF_TEST[item.originalname] for item in request.session.items
                if getattr(item, "module", None) is request.module and item.originalname in EXAMPLE_OF_TEST}
    runs = {name: ExampleRun(name, folder) for name in sorted(selected)}
    try:
        yield runs
    finally:
        for run in runs.values():
            run.stop()


def figures(pattern: str, out: str) -> tuple:
    found = re.search(pattern, out)
    assert found, f"no line matching {pattern!r} in:\n{out[-3000:]}"
    return found.groups()


@pytest.mark.sandbox
def test_math_flywheel(examples):
    out = examples["math_flywheel"].output()
    passed, n, tokens = figures(r"first pass \(.*\): pass rate (\d+)/(\d+), decoded tokens (\d+)", out)
    assert int(n) >= 2 and int(passed) == int(n), "every first-pass answer is verified (the solver backs the model)"
    again, n2, tokens2 = figures(r"second pass \(.*\): pass rate (\d+)/(\d+), decoded tokens (\d+)", out)
    assert (again, n2) == (passed, n), "the second pass answers every question from the memory, correctly"
    assert int(tokens2) < int(tokens), "the second pass decodes less than the first"
    exact, n3 = figures(r"exact hits: (\d+)/(\d+)", out)
    assert exact == n3
    assert "python verifier ran the method" in out


def test_langchain_skills_agent(examples):
    out = examples["langchain_skills_agent"].output()
    (decisions,) = figures(r"questions: \d+, decisions: (.+)", out)
    assert "graft" in decisions.split(", ") and "abstain" in decisions.split(", ")
    (placed,) = figures(r"skills placed: (.+)", out)
    assert placed != "none"
    memory_tokens, plain_tokens = (int(x) for x in figures(r"prompt tokens prefilled: memory (\d+), routing off (\d+)", out))
    assert 0 < memory_tokens and 0 < plain_tokens
    grafts = re.findall(r"^  graft +(\S+) +(\d+) +(\d+) ", out, flags=re.MULTILINE)
    again = [(int(prefilled), int(restored)) for i, (skills, prefilled, restored) in enumerate(grafts)
             if skills in {earlier for earlier, _, _ in grafts[:i]}]
    assert again and all(restored > 10 * prefilled for prefilled, restored in again), \
        "a skill used again is restored, not prefilled again"
    seconds = [float(x) for x in figures(r"time to answer: memory ([\d.]+) s, routing off ([\d.]+) s", out)]
    assert all(s > 0 for s in seconds)


@pytest.mark.server
def test_team_assistant(examples):
    out = examples["team_assistant"].output()
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
