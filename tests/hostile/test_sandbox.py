"""Hostile method code against the python verifier's sandbox (skillgraft.verify.sandbox).

Threat model: the method is written by an attacker (or by a model). It may fork, detach, flood
its output, fill the disk, look at other processes and try to outlive or tamper with its own
verification or a later one. Each test is one attack; each held against the old sandbox only
by luck, if at all. docs/limits.md names what the sandbox stops and what it does not.
"""

from __future__ import annotations

import glob
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from skillgraft.verify import sandbox
from skillgraft.errors import ConfigError
from skillgraft.verify.verifiers import PythonVerifier
from skillgraft.verify.sandbox import Limits, run_python

pytestmark = [pytest.mark.sandbox, pytest.mark.skipif(
    sandbox.unavailable_reason() is not None and not os.environ.get("SKILLGRAFT_REQUIRE_SANDBOX"), reason=f"no sandbox here: {sandbox.unavailable_reason()}"
)]

LIMITS = Limits(wall_s=3, cpu_s=2, memory_mb=256, max_processes=16, max_output_bytes=4096, tmp_mb=8)
VERIFIER = PythonVerifier(timeout_s=3, cpu_s=2, memory_mb=256, max_processes=16, max_output_bytes=4096, tmp_mb=8)


SLEEPER = "import sys, time; time.sleep(float(sys.argv[1]))"  # a sleep inside the sandbox, where no /bin is


def _marker() -> str:
    """A unique sleep of about 20 s: it names the processes an attack leaves behind."""
    return f"20.{random.randrange(10**9):09d}"


def _host_pids_running(marker: str) -> list[int]:
    pids = []
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            with open(path, "rb") as handle:
                if marker.encode() in handle.read():
                    pids.append(int(path.split("/")[2]))
        except OSError:
            pass
    return [pid for pid in pids if pid != os.getpid()]


@pytest.fixture
def leftovers():
    """Markers whose processes must be gone after the run; any survivor is killed afterwards."""
    markers: list[str] = []
    yield markers
    for marker in markers:
        for pid in _host_pids_running(marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _code(text: str, **values: object) -> str:
    text = textwrap.dedent(text)
    for name, value in values.items():
        text = text.replace(name, repr(value))
    return text


def test_double_forked_setsid_grandchild_dies_with_the_run(leftovers):
    marker = _marker()
    leftovers.append(marker)
    code = _code(
        """
        import os, sys
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                null = os.open('/dev/null', os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                os.execv(sys.executable, [sys.executable, '-S', '-c', SLEEPER, MARKER])
            os._exit(0)
        os.wait()
        print(42)
        """,
        MARKER=marker, SLEEPER=SLEEPER,
    )
    verdict = VERIFIER.check("q", "42", code)
    assert verdict.ok, verdict.detail
    assert _host_pids_running(marker) == []


def test_detached_child_holding_stdout_cannot_stretch_the_wall_limit(leftovers):
    marker = _marker()
    leftovers.append(marker)
    code = _code(
        """
        import os, sys
        if os.fork() == 0:
            os.setsid()
            os.execv(sys.executable, [sys.executable, '-S', '-c', SLEEPER, MARKER])  # keeps stdout open
        print(42)
        """,
        MARKER=marker, SLEEPER=SLEEPER,
    )
    started = time.monotonic()
    verdict = VERIFIER.check("q", "42", code)
    assert time.monotonic() - started < 3 + 2
    assert verdict.ok, verdict.detail
    assert _host_pids_running(marker) == []


def test_a_method_that_outlives_the_wall_limit_is_stopped_with_all_its_children(leftovers):
    marker = _marker()
    leftovers.append(marker)
    code = _code(
        """
        import os, sys, time
        if os.fork() == 0:
            os.setsid()
            os.execv(sys.executable, [sys.executable, '-S', '-c', SLEEPER, MARKER])
        time.sleep(60)
        """,
        MARKER=marker, SLEEPER=SLEEPER,
    )
    started = time.monotonic()
    result = run_python(code, LIMITS)
    assert time.monotonic() - started < 3 + 2
    assert result.returncode < 0 and "wall time limit" in result.killed_reason
    assert _host_pids_running(marker) == []


def test_runs_cannot_see_each_others_files():
    name = f"planted-{random.randrange(10**9)}"
    planter = _code(
        """
        import time
        for folder in ('.', '/tmp', '/var/tmp', '/dev/shm'):
            open(folder + '/' + NAME, 'w').write('print(400)')
        time.sleep(1.5)
        print(42)
        """,
        NAME=name,
    )
    looker = _code(
        """
        import glob
        found = [p for root in ('/tmp', '/var/tmp', '/dev/shm')
                 for p in glob.glob(root + '/**', recursive=True) if NAME in p]
        print(found)
        """,
        NAME=name,
    )
    first = threading.Thread(target=run_python, args=(planter, LIMITS))
    first.start()
    try:
        time.sleep(0.7)
        seen = run_python(looker, LIMITS)
    finally:
        first.join()
        for root in ("/tmp", "/tmp/skillgraft-verify-*", "/var/tmp", "/dev/shm"):  # where the old sandbox left it
            for path in glob.glob(f"{root}/{name}"):
                os.remove(path)
    assert seen.returncode == 0 and seen.stdout.strip() == "[]", seen


def test_temp_folders_are_private_bounded_and_gone_after_the_run():
    name = f"persist-{random.randrange(10**9)}"
    code = _code(
        """
        import os
        print(oct(os.stat('.').st_mode & 0o777), os.stat('.').st_uid == os.getuid())
        for folder in ('/tmp', '/var/tmp', '/dev/shm'):
            written = 0
            try:
                for i in range(40):
                    with open(folder + '/' + NAME + str(i), 'wb') as handle:
                        handle.write(b'x' * (1 << 20))
                    written += 1
            except OSError:
                pass
            print(folder, written)
        """,
        NAME=name,
    )
    try:
        result = run_python(code, LIMITS)
    finally:
        left = glob.glob(f"/tmp/{name}*") + glob.glob(f"/var/tmp/{name}*") + glob.glob(f"/dev/shm/{name}*")
        for path in left:
            os.remove(path)
    lines = result.stdout.split("\n")
    assert lines[0] == "0o700 True", result
    for line in lines[1:4]:
        assert int(line.split()[1]) <= 8, result  # tmp_mb=8: the tmpfs is full at 8 MiB, not 40
    assert left == []


@pytest.mark.skipif(not os.path.isdir("/run/lock") or not os.stat("/run/lock").st_mode & 0o002, reason="no /run/lock")
def test_the_filesystem_is_read_only_and_the_hosts_writable_folders_are_absent():
    target = f"/run/lock/skillgraft-attack-{random.randrange(10**9)}"
    code = _code(
        """
        import os, sys
        for path in (TARGET, '/planted', os.path.join(os.path.dirname(os.__file__), 'planted.py')):
            try:
                open(path, 'w').write('kept')
                print('written', path)
            except OSError as exc:
                print(type(exc).__name__, exc.strerror)
        """,
        TARGET=target,
    )
    try:
        result = run_python(code, LIMITS)
    finally:
        planted = os.path.exists(target)
        if planted:
            os.remove(target)
    assert not planted and result.stdout.splitlines() == [
        "FileNotFoundError No such file or directory", "OSError Read-only file system", "OSError Read-only file system",
    ], result


def test_other_processes_and_their_command_lines_are_invisible():
    marker = _marker()
    witness = subprocess.Popen(["sleep", marker])
    try:
        code = _code(
            """
            import glob
            pids = glob.glob('/proc/[0-9]*')
            lines = [open(p + '/cmdline', 'rb').read() for p in pids]
            print(len(pids), any(MARKER.encode() in line for line in lines))
            """,
            MARKER=marker,
        )
        result = run_python(code, LIMITS)
    finally:
        witness.kill()
        witness.wait()
    count, seen = result.stdout.split()
    assert seen == "False" and int(count) <= 3, result  # init, the method (and /proc/self)


def test_the_callers_argv_never_reaches_the_method(tmp_path):
    # The caller runs with a tell-tale argument; the method tries every way to read it.
    marker = f"--fresh-{random.randrange(10**9)}"
    method = """
import glob, os, sys
seen = [' '.join(sys.argv), repr(dict(os.environ))]
for path in glob.glob('/proc/*/cmdline') + glob.glob('/proc/*/environ') + ['/proc/%d/cmdline' % os.getppid()]:
    try:
        seen.append(open(path, 'rb').read().decode('latin-1'))
    except OSError:
        pass
for fd in range(3, 64):
    try:
        seen.append(os.read(fd, 65536).decode('latin-1'))
    except OSError:
        pass
print('\\n'.join(seen))
"""
    caller = tmp_path / "caller.py"
    caller.write_text(
        "import sys\nfrom skillgraft.verify.verifiers import PythonVerifier\n"
        "code, out, err, _ = PythonVerifier(timeout_s=5).run(open(sys.argv[1]).read())\n"
        "print(code, out, err)\n"
    )
    (tmp_path / "method.py").write_text(method)
    done = subprocess.run(
        [sys.executable, str(caller), str(tmp_path / "method.py"), marker],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("0 "), done.stdout[-2000:]
    assert marker not in done.stdout


WATCHER = """
import glob, os, time
def claim():
    for cmdline in glob.glob('/proc/[0-9]*/cmdline'):
        try:
            for arg in open(cmdline, 'rb').read().split(b'\\0'):
                if arg.startswith(b'--fresh'):
                    return arg.decode()
        except OSError:
            pass
end = time.time() + 60
while time.time() < end and not claim():  # idle until a verifying process shows up
    time.sleep(0.2)
answer, done = claim(), set()
while time.time() < end:
    for path in set(glob.glob('/tmp/skillgraft-verify-*/method.py') + glob.glob('/tmp/method/method.py')) - done:
        try:
            os.unlink(path)
            open(path, 'w').write('print(%r)' % answer)
            done.add(path)
        except OSError:
            pass
    time.sleep(0.0005)
"""


def test_a_planted_watcher_cannot_rewrite_a_later_verification(tmp_path, leftovers):
    # The reported forgery: one run leaves a watcher that rewrites later runs' method.py to print
    # an argument read from the verifying process's command line.
    marker = _marker()
    leftovers.append(marker)
    planter = _code(
        """
        import os, sys
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                null = os.open('/dev/null', os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                os.execv(sys.executable, [sys.executable, '-c', WATCHER, MARKER])
            os._exit(0)
        print(1)
        """,
        WATCHER=WATCHER,
        MARKER=marker, SLEEPER=SLEEPER,
    )
    assert VERIFIER.check("q", "1", planter).ok
    caller = tmp_path / "caller.py"
    caller.write_text(
        "from skillgraft.verify.verifiers import PythonVerifier\n"
        "for _ in range(5):\n"
        "    print(PythonVerifier(timeout_s=5).check('What is 17 * 23?', '391', 'print(17 * 23)').detail)\n"
    )
    done = subprocess.run(
        [sys.executable, str(caller), f"--fresh-{marker}"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["method printed '391'"] * 5


def test_output_over_the_limit_is_refused_never_judged_on_a_partial_line():
    # The first 4 KiB end in "42"; the real last line is "41".
    verdict = VERIFIER.check("q", "42", "print('42\\n' * 5000 + '41')")
    assert not verdict.ok and "over the limit" in verdict.detail


def test_a_gigabyte_of_output_keeps_the_caller_small():
    probe = textwrap.dedent(
        """
        import resource
        from skillgraft.verify.sandbox import Limits, run_python
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        code = "import sys\\nchunk = b'x' * (1 << 20)\\nfor _ in range(1024):\\n    sys.stdout.buffer.write(chunk)"
        result = run_python(code, Limits(wall_s=60))
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(after - before, result.truncated, len(result.stdout))
        """
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    grown_kib, truncated, kept = done.stdout.split()
    assert int(grown_kib) < 32 * 1024, f"the caller grew by {grown_kib} KiB"
    assert truncated == "True" and int(kept) == 65536


def test_deep_folders_are_no_crash_and_leave_nothing_behind():
    before = set(glob.glob("/tmp/skillgraft-verify-*"))
    code = "import os\nfor _ in range(5000):\n    os.mkdir('d')\n    os.chdir('d')\nprint(42)"
    verdict = VERIFIER.check("q", "42", code)
    assert verdict.ok, verdict.detail
    assert set(glob.glob("/tmp/skillgraft-verify-*")) == before


def test_the_method_cannot_forge_its_status_or_stop_its_init():
    code = """
import os, signal
for fd in range(3, 256):
    try:
        os.write(fd, b'exit 0\\n')
    except OSError:
        pass
for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
    try:
        os.kill(1, sig)
    except OSError:
        pass
os.kill(os.getpid(), signal.SIGKILL)
"""
    result = run_python(code, LIMITS)
    assert result.returncode == -signal.SIGKILL and result.killed_reason == "", result


def test_fork_bomb_is_bounded_and_cleaned_up(leftovers):
    marker = _marker()
    leftovers.append(marker)
    code = _code(
        """
        import os, sys
        forked = 0
        for _ in range(1000):
            try:
                if os.fork() == 0:
                    os.execv(sys.executable, [sys.executable, '-S', '-c', SLEEPER, MARKER])
            except OSError:
                break
            forked += 1
        print(forked)
        print(42)
        """,
        MARKER=marker, SLEEPER=SLEEPER,
    )
    result = run_python(code, LIMITS)
    assert result.returncode == 0 and result.stdout.split()[-1:] == ["42"], result
    forked = int(result.stdout.split()[0])
    assert 0 < forked < LIMITS.max_processes, f"{forked} processes forked under a limit of {LIMITS.max_processes}"
    assert _host_pids_running(marker) == []


def test_a_kernel_without_namespaces_is_a_config_error(monkeypatch):
    monkeypatch.setattr(sandbox, "_CLONE_FLAGS", 0x1)  # unshare refuses: EINVAL
    with pytest.raises(ConfigError, match="could not start"):
        run_python("print(1)", LIMITS)
