import os
from pathlib import Path

import pytest

from skillgraft.verify import sandbox
from skillgraft.verify.verifiers import PythonVerifier

pytestmark = pytest.mark.sandbox

needs_sandbox = pytest.mark.skipif(
    sandbox.unavailable_reason() is not None and not os.environ.get("SKILLGRAFT_REQUIRE_SANDBOX"), reason=f"no sandbox here: {sandbox.unavailable_reason()}"
)
FAST = PythonVerifier(timeout_s=5, cpu_s=2, memory_mb=256, max_processes=8)


@needs_sandbox
def test_correct_method_is_accepted_with_its_output_hash():
    verdict = FAST.check("q", "42", "print(6 * 7)")
    assert verdict.ok and verdict.verifier == "python" and len(verdict.output_sha256) == 64


@needs_sandbox
@pytest.mark.parametrize(
    "code, fragment",
    [
        ("while True:\n    pass", "killed"),
        ("import time\ntime.sleep(60)", "killed"),
        ("x = bytearray(2 * 1024**3)\nprint(42)", "MemoryError"),
        ("raise SystemExit(3)", "exit code 3"),
        ("1/0", "ZeroDivisionError"),
    ],
)
def test_runaway_or_crashing_methods_are_contained_and_refused(code, fragment):
    verdict = FAST.check("q", "42", code)
    assert not verdict.ok and fragment in verdict.detail
    assert verdict.seconds < 8


@needs_sandbox
def test_fork_bomb_is_contained():
    code = "import os\nfor _ in range(10000):\n    try:\n        os.fork()\n    except OSError:\n        break\nprint(42)"
    verdict = FAST.check("q", "42", code)
    assert verdict.seconds < 8  # contained: the process limit, then the PID namespace dies with the run


@needs_sandbox
def test_environment_secrets_are_not_visible(monkeypatch):
    monkeypatch.setenv("SKILLGRAFT_TEST_SECRET", "hunter2")
    verdict = FAST.check("q", "None", "import os\nprint(os.environ.get('SKILLGRAFT_TEST_SECRET'))")
    assert verdict.ok


@needs_sandbox
def test_network_is_cut():
    # A fresh network namespace holds only a loopback interface, and it is down.
    code = "print([line.split(':')[0].strip() for line in open('/proc/net/dev').read().splitlines()[2:]])"
    host_interfaces = [line.split(":")[0].strip() for line in Path("/proc/net/dev").read_text().splitlines()[2:]]
    if host_interfaces == ["lo"]:
        pytest.skip("this host has no network interface to cut")
    verdict = FAST.check("q", "['lo']", code)
    assert verdict.ok, verdict.detail


@needs_sandbox
def test_run_keeps_its_tuple_and_names_the_wall_limit():
    assert FAST.run("print(1)")[:3] == (0, "1\n", "")
    returncode, _, err, seconds = PythonVerifier(timeout_s=1).run("import time\ntime.sleep(30)")
    assert returncode < 0 and "wall time limit of 1s exceeded" in err and seconds < 4
