import os

import pytest

from skillgraft.flywheel import PythonVerifier, answers_match, extract_answer

FAST = PythonVerifier(timeout_s=5, cpu_s=2, memory_mb=256, max_processes=8)


def test_correct_method_is_accepted_with_its_output_hash():
    verdict = FAST.check("q", "42", "print(6 * 7)")
    assert verdict.ok and verdict.verifier == "python" and len(verdict.output_sha256) == 64


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


def test_fork_bomb_is_contained():
    code = "import os\nfor _ in range(10000):\n    try:\n        os.fork()\n    except OSError:\n        break\nprint(42)"
    verdict = FAST.check("q", "42", code)
    assert verdict.seconds < 8  # contained: the sandbox's process group is killed afterwards


def test_environment_secrets_are_not_visible(monkeypatch):
    monkeypatch.setenv("SKILLGRAFT_TEST_SECRET", "hunter2")
    verdict = FAST.check("q", "None", "import os\nprint(os.environ.get('SKILLGRAFT_TEST_SECRET'))")
    assert verdict.ok


@pytest.mark.skipif(os.geteuid() != 0, reason="a network namespace needs root")
def test_network_is_cut():
    # A fresh network namespace holds only a loopback interface, and it is down.
    code = "print([line.split(':')[0].strip() for line in open('/proc/net/dev').read().splitlines()[2:]])"
    host_interfaces = [line.split(":")[0].strip() for line in open("/proc/net/dev").read().splitlines()[2:]]
    if host_interfaces == ["lo"]:
        pytest.skip("this host has no network interface to cut")
    verdict = FAST.check("q", "['lo']", code)
    assert verdict.ok, verdict.detail


def test_answer_helpers():
    assert answers_match("5050", "5,050") and answers_match("Paris", " paris ") and not answers_match("1", "2")
    assert extract_answer("The answer is 1,234.") == "1234"
    assert extract_answer("Paris\nis the capital") == "Paris"
