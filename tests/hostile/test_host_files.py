"""The python verifier as a file oracle: method code that tries to read the host.

The attack (issue: "the verifier is a file oracle"): a deposit whose method prints one bit of
a host file, with the answer ``1``; accepted means 1, refused means 0. It read ``/etc/machine-id``
back exactly. The sandbox now runs the method in a fresh root holding only what the interpreter
needs, whatever user the caller is: each test here tries to read the host and expects nothing.
The gateway (HTTP) and MCP deposit surfaces are tested in tests/test_gateway_hardening.py and
tests/test_mcp.py.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from skillgraft.verify import sandbox
from skillgraft.verify.sandbox import Limits, run_python

pytestmark = [pytest.mark.sandbox, pytest.mark.skipif(
    sandbox.unavailable_reason() is not None and not os.environ.get("SKILLGRAFT_REQUIRE_SANDBOX"),
    reason=f"no sandbox here: {sandbox.unavailable_reason()}",
)]

ROOT = Path(__file__).resolve().parents[2]
LIMITS = Limits(wall_s=10, cpu_s=5, memory_mb=256)
NOBODY = 65534

# Prints, as JSON, every path of ``paths`` the method could open or list (nothing, here).
PROBE = """
import json, os
seen = {}
for path in PATHS:
    try:
        seen[path] = os.listdir(path) if os.path.isdir(path) else open(path, 'rb').read(64).decode('latin-1')
    except OSError as exc:
        pass
print(json.dumps(seen))
"""


def _host_paths(store_file: str) -> list[str]:
    paths = ["/etc/machine-id", "/etc/passwd", "/etc/hostname", "/etc/hosts", "/etc/shadow", "/var/lib/dbus/machine-id",
             "/home", "/work", "/run", "/sys/class/net", "/proc/1/environ", f"/proc/{os.getpid()}/environ",
             f"/proc/{os.getpid()}/cmdline", store_file, os.path.dirname(store_file), os.getcwd(), str(ROOT)]
    return [path for path in paths if os.path.exists(path)]


@pytest.fixture
def store_file():
    """A store's catalog file, world-readable in a world-searchable folder (as a shared store may be)."""
    folder = tempfile.mkdtemp(prefix="skillgraft-store-", dir="/tmp")
    os.chmod(folder, 0o755)
    path = os.path.join(folder, "catalog.db")
    with open(path, "w") as handle:
        handle.write("SQLite format 3 secret-canary-7731")
    os.chmod(path, 0o644)
    try:
        yield path
    finally:
        shutil.rmtree(folder)


def _probe_code(paths: list[str]) -> str:
    return PROBE.replace("PATHS", repr(paths))


def test_a_method_sees_no_host_file_as_the_caller_runs_it(store_file, monkeypatch):
    monkeypatch.setenv("SKILLGRAFT_API_KEY", "gateway-secret-4242")  # the gateway's environment
    paths = _host_paths(store_file)
    assert "/etc/passwd" in paths and store_file in paths
    result = run_python(_probe_code(paths), LIMITS)
    assert result.returncode == 0, result
    assert json.loads(result.stdout) == {}, result.stdout
    assert "gateway-secret-4242" not in result.stdout


def test_the_bit_oracle_answer_is_the_same_for_every_file(store_file):
    """The reported attack, bit 0 of each file's first byte: both answers are refused alike,
    since the method cannot open the file at all."""
    from skillgraft.verify.verifiers import PythonVerifier

    verifier = PythonVerifier(timeout_s=10, cpu_s=5, memory_mb=256)
    for path in ("/etc/machine-id", "/etc/passwd", store_file):
        if not os.path.exists(path):
            continue
        method = f"print(open({path!r}, 'rb').read(1)[0] & 1)"
        verdicts = [verifier.check("bit?", answer, method) for answer in ("0", "1")]
        assert [verdict.ok for verdict in verdicts] == [False, False], (path, verdicts)
        assert all("FileNotFoundError" in verdict.detail for verdict in verdicts), verdicts


def _minimal_package(folder: str) -> None:
    """The sandbox's modules, standard library only, copied where any user can read them."""
    package = os.path.join(folder, "skillgraft")
    os.makedirs(os.path.join(package, "verify"))
    shutil.copy(ROOT / "skillgraft" / "errors.py", package)
    for name in ("sandbox.py", "sandbox_init.py", "sandbox_root.py"):
        shutil.copy(ROOT / "skillgraft" / "verify" / name, os.path.join(package, "verify"))
    for init in (package, os.path.join(package, "verify")):
        Path(init, "__init__.py").touch()
    for base, folders, files in os.walk(folder):
        for name in folders + files:
            path = os.path.join(base, name)
            os.chmod(path, os.stat(path).st_mode | stat.S_IROTH | (stat.S_IXOTH if name in folders else 0))


@pytest.mark.skipif(os.geteuid() != 0, reason="already an ordinary user: the test above is that case")
def test_a_method_sees_no_host_file_when_an_ordinary_user_runs_the_verifier(store_file):
    """An ordinary user (``nobody``) runs the sandbox (user-namespace mode): the files that user
    may read, such as /etc/passwd and a world-readable store, stay out of the method's reach."""
    python = next((path for path in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(path, os.X_OK)), None)
    if python is None:
        pytest.fail("no system python3 for the ordinary user")
    folder = tempfile.mkdtemp(prefix="skillgraft-sandbox-", dir="/tmp")
    try:
        os.chmod(folder, 0o755)
        _minimal_package(folder)
        paths = _host_paths(store_file)
        caller = (
            "import json, os, sys\nfrom skillgraft.verify.sandbox import run_python, Limits\n"
            f"result = run_python({_probe_code(paths)!r}, Limits(wall_s=10, cpu_s=5, memory_mb=256))\n"
            "print(json.dumps([os.geteuid(), open('/etc/passwd').read(4), result.returncode, result.stdout, result.stderr]))\n"
        )
        done = subprocess.run([python, "-I", "-c", f"import sys; sys.path.insert(0, {folder!r})\n" + caller],
                              capture_output=True, text=True, timeout=120, cwd="/", user=NOBODY, group=NOBODY,
                              extra_groups=[], env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
    finally:
        shutil.rmtree(folder)
    assert done.returncode == 0, done.stderr
    euid, passwd, returncode, stdout, stderr = json.loads(done.stdout)
    assert euid == NOBODY and passwd  # the caller itself reads /etc/passwd; its method does not
    assert returncode == 0, stderr
    assert json.loads(stdout) == {}, stdout
