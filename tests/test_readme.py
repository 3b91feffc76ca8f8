"""The README's steps run as written, in order, in a fresh folder.

Each fenced block runs as it stands: Python blocks with this interpreter, shell blocks with
bash (`.venv/bin/skillgraft` is this checkout's CLI). The gateway block's two commands are
servers: `serve` runs in the background while the Python block after it talks to it (on a
free port instead of 8080, which another process may hold), `mcp` gets a closed stdin and
must exit cleanly. Three blocks are not run, for the reasons in ``NOT_RUN``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.model, pytest.mark.server, pytest.mark.sandbox]

NOT_RUN = {
    "make demo": "the install step: it made the environment this test runs in",
    "migrate-store": "needs a PostgreSQL server and an S3 bucket on other hosts (tests/test_shared_store.py runs it on loopback)",
    "examples/team_assistant.py": "the example agents' full runs, from the checkout: tests/test_examples.py runs them",
}
TIMEOUT_S = 900


def readme_blocks() -> list[tuple[str, str]]:
    """``(language, code)`` of every fenced block of the README, in order."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"^```(\w*)\n(.*?)^```", text, re.M | re.S)


@pytest.fixture
def folder(tmp_path) -> Path:
    """A fresh folder whose `.venv/bin/skillgraft` runs this checkout's CLI."""
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    wrapper = bin_dir / "skillgraft"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m skillgraft "$@"\n')
    wrapper.chmod(0o755)
    return tmp_path


def _env() -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    for name in ("SKILLGRAFT_HOME", "SKILLGRAFT_MODEL", "SKILLGRAFT_CATALOG", "SKILLGRAFT_BLOCKS"):
        env.pop(name, None)
    return env


def _run(argv: list[str], folder: Path, **options) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, cwd=folder, env=_env(), capture_output=True, text=True, timeout=TIMEOUT_S, **options)
    assert done.returncode == 0, f"{argv[:2]} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


class Gateway:
    """The README's `serve` line, in the background on a free port; stopped by its PID."""

    def __init__(self, line: str, folder: Path) -> None:
        argv = ["bash", "-c", "exec " + line.split("  #")[0].replace("--port 8080", "--port 0")]
        self.log = folder / "serve.log"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(argv, cwd=folder, env=_env(), stdout=subprocess.PIPE, stderr=log,
                                            text=True, start_new_session=True)
        ready = self.process.stdout.readline()
        assert ready, f"serve exited: {self.log.read_text()[-3000:]}"
        self.port = json.loads(ready)["url"].rsplit(":", 1)[1]

    def stop(self) -> int:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
        code = self.process.wait(timeout=120)
        self.process.stdout.close()
        return code


def test_the_readme_steps_run_in_order(folder):
    from tests.required import require_llama_server

    require_llama_server()
    outputs: list[str] = []
    gateway = None
    try:
        for language, code in readme_blocks():
            if any(marker in code for marker in NOT_RUN):
                continue
            if gateway is not None:
                code = code.replace(":8080", f":{gateway.port}")
            if language == "python":
                outputs.append(_run([sys.executable, "-c", code], folder).stdout)
            elif " serve " in code:
                serve_line, mcp_line = [line for line in code.splitlines() if line.strip()]
                gateway = Gateway(serve_line, folder)
                _run(["bash", "-c", mcp_line], folder, stdin=subprocess.DEVNULL)
            else:
                outputs.append(_run(["bash", "-e", "-c", code], folder).stdout)
    finally:
        if gateway is not None:
            assert gateway.stop() == 0
    python_tour, shell_tour, client = outputs
    assert python_tour.splitlines()[0] == "exact" and "graft" in python_tour and "abstain" in python_tour
    assert (folder / "manual.txt").is_file() and (folder / "shell-store" / "catalog.db").is_file()
    assert '"decision": "graft"' in shell_tour and '"sha_equal": 5' in shell_tour and '"sha_equal": 3' in shell_tour
    assert client.split()[0] == "graft"
