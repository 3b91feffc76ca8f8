"""Running untrusted Python code under limits (the sandbox of the ``python`` verifier).

Each run gets its own Linux mount, PID, network, IPC and UTS namespaces (and a user namespace
when the caller is not root), set up by ``sandbox_init.py``:

- a fresh root holding only what the interpreter needs (read-only binds of the interpreter, its
  standard library and the libraries it loads; see ``sandbox_root.py``): no host ``/etc``,
  ``/home``, ``/root``, store or working folder, whatever user the caller is;
- every process of the run lives in the PID namespace; when the method ends, or is stopped,
  the namespace's init exits and the kernel kills everything left, double-forked or not;
- a fresh ``/proc`` shows only the run's own processes, never another command line;
- everything but the private tmpfs mounts is read-only; ``/tmp``, ``/var/tmp`` and
  ``/dev/shm`` are fresh tmpfs mounts of ``tmp_mb`` each, seen by this run only and gone with
  it; the method runs in ``/tmp/method`` (mode 0700, owned by the method's user);
- no network (an empty network namespace), a scrubbed environment, no inherited descriptors,
  no capabilities, ``no_new_privs``, user ``nobody`` when the caller is root;
- CPU, memory, process, file size and descriptor limits (``setrlimit``);
- the caller enforces the wall limit and reads stdout and stderr as they come, stopping the run
  as soon as either goes over ``max_output_bytes``.

Where the kernel refuses namespaces (not Linux, user namespaces disabled, a seccomp profile that
forbids ``unshare``), :func:`run_python` raises :class:`ConfigError`; it never runs code with less.
"""

from __future__ import annotations

import functools
import marshal
import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Optional

from ..errors import ConfigError, InputError
from .sandbox_root import root_plan

_INIT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_init.py")
_CLONE_FLAGS = 0x00020000 | 0x04000000 | 0x08000000 | 0x20000000 | 0x40000000  # NEWNS|NEWUTS|NEWIPC|NEWPID|NEWNET
_ENV = {
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "HOME": "/tmp/method",
    "TMPDIR": "/tmp",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONHASHSEED": "0",
}
_GRACE_S = 2.0  # after a stop, how long the namespace may take to die before the init is killed
_CHUNK = 65536


@dataclass(frozen=True)
class Limits:
    """What one run may use."""

    wall_s: float = 10.0
    cpu_s: int = 5
    memory_mb: int = 512
    max_processes: int = 16
    max_output_bytes: int = 65536  # per stream; more stops the run
    tmp_mb: int = 32  # each of /tmp, /var/tmp, /dev/shm
    max_file_mb: int = 16
    max_inodes: int = 16384  # files and folders per tmpfs

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not value or value <= 0:
                raise ConfigError(f"sandbox limit {name} must be positive, got {value!r}")


@dataclass(frozen=True)
class SandboxRun:
    """How a run ended. ``returncode`` is the exit code, or minus the signal that killed it."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float
    killed_reason: str = ""  # why the sandbox stopped the method; empty when it ended by itself
    truncated: bool = False  # stdout or stderr went over the limit, so the run was stopped there


def _config(limits: Limits) -> dict:
    plan = root_plan(sys.executable)
    tmp_bytes = limits.tmp_mb << 20
    return {
        "parent_pid": os.getpid(),
        "clone_flags": _CLONE_FLAGS,
        "as_root": os.geteuid() == 0,
        "python": plan.python,
        "root": plan.as_config(),
        "env": _ENV,
        "tmp_kib": tmp_bytes >> 10,
        "tmp_inodes": limits.max_inodes,
        "limits": {
            "CPU": limits.cpu_s,
            "AS": limits.memory_mb << 20,
            "NPROC": limits.max_processes,
            "FSIZE": min(limits.max_file_mb << 20, tmp_bytes),
            "NOFILE": 256,
            "CORE": 0,
        },
    }


class _Run:
    """One run seen from the caller: feeds the code, reads every pipe, enforces the wall limit."""

    def __init__(self, code: bytes, limits: Limits) -> None:
        self.limits = limits
        self.started = time.monotonic()
        self.deadline = self.started + limits.wall_s
        self.killed_reason = ""
        self.truncated = False
        self.pidfd: Optional[int] = None
        self.status = bytearray()
        config = _config(limits)  # before anything starts: a sandbox that cannot be built runs nothing
        status_r, status_w = os.pipe()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", _INIT, str(status_w)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(status_w,),
                env=_ENV,
                cwd="/",
            )
        except OSError as exc:
            os.close(status_r)
            raise ConfigError(f"the python sandbox could not start: {exc}") from exc
        finally:
            os.close(status_w)
        self.status_r = status_r
        self.pending = memoryview(marshal.dumps((config, code)))
        self.output = {self.process.stdout: bytearray(), self.process.stderr: bytearray()}

    def stop(self, reason: str) -> None:
        """Kill the namespace's init (the kernel then kills the rest); remember why."""
        if self.killed_reason:
            return
        self.killed_reason = reason
        self.deadline = time.monotonic() + _GRACE_S
        try:
            if self.pidfd is not None:
                signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
            else:  # its init dies with it (PR_SET_PDEATHSIG)
                self.process.kill()
        except ProcessLookupError:
            pass

    def _read(self, stream, selector) -> None:
        data = os.read(stream if isinstance(stream, int) else stream.fileno(), _CHUNK)
        if not data:
            selector.unregister(stream)
            return
        if stream is self.status_r:
            self.status += data
            self._watch_pid1()
            return
        kept = self.output[stream]
        room = self.limits.max_output_bytes - len(kept)
        kept += data[: max(room, 0)]
        if len(data) > room and not self.truncated:
            self.truncated = True
            name = "stdout" if stream is self.process.stdout else "stderr"
            self.stop(f"{name} went over the limit of {self.limits.max_output_bytes} bytes")

    def _watch_pid1(self) -> None:
        if self.pidfd is not None:
            return
        for line in self.status.decode("utf-8", "replace").splitlines():
            if line.startswith("pid "):
                try:
                    self.pidfd = os.pidfd_open(int(line[4:]))
                    if self.killed_reason:  # stopped before we knew it
                        signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass

    def _write(self, selector) -> None:
        try:
            written = os.write(self.process.stdin.fileno(), self.pending[:_CHUNK])
        except BlockingIOError:
            return
        except BrokenPipeError:  # the init is gone; its status (or its absence) tells why
            written = len(self.pending)
        self.pending = self.pending[written:]
        if not self.pending:
            selector.unregister(self.process.stdin)
            self.process.stdin.close()

    def communicate(self) -> None:
        with selectors.DefaultSelector() as selector:
            for stream in (self.process.stdout, self.process.stderr):
                os.set_blocking(stream.fileno(), False)
                selector.register(stream, selectors.EVENT_READ)
            selector.register(self.status_r, selectors.EVENT_READ)
            os.set_blocking(self.process.stdin.fileno(), False)
            selector.register(self.process.stdin, selectors.EVENT_WRITE)
            while selector.get_map():
                remaining = self.deadline - time.monotonic()
                if remaining <= 0:
                    if self.killed_reason:  # the namespace did not die in time: give up on it
                        break
                    self.stop(f"wall time limit of {self.limits.wall_s}s exceeded")
                    continue
                for key, _ in selector.select(remaining):
                    if key.fileobj is self.process.stdin:
                        self._write(selector)
                    else:
                        self._read(key.fileobj, selector)

    def finish(self) -> SandboxRun:
        try:
            self.process.wait(timeout=max(self.deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        seconds = time.monotonic() - self.started
        lines = self.status.decode("utf-8", "replace").splitlines()
        errors = [line[6:] for line in lines if line.startswith("error ")]
        returncode, reason = -signal.SIGKILL, self.killed_reason
        for line in lines:
            kind, _, value = line.partition(" ")
            if kind == "exit" and not reason:
                returncode = int(value)
            elif kind == "signal" and not reason:
                returncode = -int(value)
        stderr = bytes(self.output[self.process.stderr]).decode("utf-8", "replace")
        ended = any(line.startswith(("exit ", "signal ")) for line in lines)
        if errors and not ended:
            raise ConfigError(
                f"the python sandbox could not start: {errors[0]} (it needs Linux namespaces: "
                "run as root, or allow unprivileged user namespaces)"
            )
        if errors:
            stderr += "".join(f"\nsandbox: {error}" for error in errors)
        if not reason and not ended:
            reason = "the sandbox ended without the method's exit status"
        stdout = bytes(self.output[self.process.stdout]).decode("utf-8", "replace")
        return SandboxRun(returncode, stdout, stderr, seconds, reason, self.truncated)

    def close(self) -> None:
        if self.process.poll() is None:
            self.stop("the caller stopped the run")
            self.process.kill()
            self.process.wait()
        for handle in (self.process.stdin, self.process.stdout, self.process.stderr):
            if handle and not handle.closed:
                handle.close()
        for fd in (self.status_r, self.pidfd):
            if fd is not None:
                os.close(fd)


def run_python(code: str, limits: Limits = Limits()) -> SandboxRun:
    """Run ``code`` as ``python -I -S method.py`` in a fresh sandbox and report how it ended."""
    if not sys.platform.startswith("linux"):
        raise ConfigError(f"the python sandbox needs Linux namespaces; this platform is {sys.platform}")
    data = code.encode("utf-8", "surrogatepass")
    if len(data) > limits.tmp_mb << 19:
        raise InputError(f"method code is {len(data)} bytes, over half the sandbox's {limits.tmp_mb} MiB /tmp")
    run = _Run(data, limits)
    try:
        run.communicate()
        return run.finish()
    finally:
        run.close()


@functools.lru_cache(maxsize=1)
def unavailable_reason() -> Optional[str]:
    """Why :func:`run_python` cannot run here, or ``None`` when it can (probed once)."""
    try:
        run_python("pass", Limits(wall_s=20))
    except ConfigError as exc:
        return str(exc)
    return None
