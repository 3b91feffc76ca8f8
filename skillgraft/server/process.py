"""The llama-server process: its pinned command line, its lifecycle, and facts read before it runs.

:func:`server_argv` turns :class:`EngineSettings` into the flags that decide KV bytes and
logits; :class:`ServerProcess` runs one server on loopback and stops it by its own PID
(on Linux it also dies with its parent); :func:`probe_system_info` reads the binary's native build without starting a server;
:func:`supports_gpu_offload` reads a started server's log for whether it can offload to a GPU.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ..config import EngineSettings
from ..errors import ServerError

if TYPE_CHECKING:
    from ..core.fingerprint import RuntimeFingerprint


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def server_argv(
    binary: Path,
    model_path: Path,
    settings: EngineSettings,
    *,
    port: int,
    slot_dir: Path,
    n_slots: int = 1,
    swa_full: bool = False,
    prompt_cache_mib: int = 0,
) -> list[str]:
    """The command line that pins every flag the fingerprint records.

    ``prompt_cache_mib`` > 0 turns on llama-server's own host-memory prompt cache (and its
    idle-slot caching), for benchmarks that compare with it; grafts want it off.
    """
    argv = [
        str(binary),
        "-m", str(model_path),
        "--host", "127.0.0.1",
        "--port", str(port),
        "-c", str((settings.n_ctx or 0) * n_slots),  # each slot its own KV stream of the whole window (0: the model's)
        "-b", str(settings.n_batch),
        "-ub", str(settings.n_ubatch),
        "-t", str(settings.n_threads),
        "-tb", str(settings.n_threads),
        "-fa", "on" if settings.flash_attn else "off",
        "-ctk", settings.type_k,
        "-ctv", settings.type_v,
        "-ngl", str(settings.n_gpu_layers),
        "-np", str(n_slots),
        "--no-kv-unified",  # a unified KV makes every slot attend over every slot's cells
        "--cache-ram", str(prompt_cache_mib),
        "--cache-idle-slots" if prompt_cache_mib > 0 else "--no-cache-idle-slots",
        "--cache-reuse", "0",
        "--ctx-checkpoints", "0",
        "--no-context-shift",
        "--no-repack",  # as the in-process engine: no AMX or repacked weight buffers
        "--fit", "off",
        "--no-webui",
        "--slot-save-path", str(slot_dir),
    ]
    if swa_full:
        argv.append("--swa-full")
    return argv


def _in_group_dying_with_parent() -> None:
    """In the child, before exec: a process group of its own; SIGTERM when the parent dies."""
    os.setpgid(0, 0)
    _die_with_parent()


def _die_with_parent() -> None:
    """In the child, before exec: ask Linux to send SIGTERM when the parent dies."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


_SPAWNER: Optional[ThreadPoolExecutor] = None
_SPAWNER_LOCK = threading.Lock()


def _spawner() -> ThreadPoolExecutor:
    global _SPAWNER
    with _SPAWNER_LOCK:
        if _SPAWNER is None:
            _SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="skillgraft-spawn")
        return _SPAWNER


def spawn_child(argv: list, *, new_session: bool = False, **popen) -> subprocess.Popen:
    """``subprocess.Popen(argv, **popen)`` for a server this process owns: on Linux it gets
    SIGTERM when this process dies (killed included), so nothing it started outlives it.

    Spawned from one thread that lives as long as this process: the death signal follows the
    thread that forked, and a request thread may be retired at any time. ``new_session`` gives
    it a session of its own; otherwise a process group of its own in this session (a
    terminal's Ctrl-C reaches this process, which stops it in order), where Linux weighs its
    threads against this process's own (a new session would be a scheduling group of its
    own, as strong as this whole process).
    """
    if sys.platform == "linux":
        setup = _die_with_parent if new_session else _in_group_dying_with_parent
        return _spawner().submit(subprocess.Popen, argv, start_new_session=new_session, preexec_fn=setup, **popen).result()
    return subprocess.Popen(argv, start_new_session=True, **popen)


class ServerProcess:
    """A llama-server child process on loopback, stopped by its own PID."""

    def __init__(self, argv: list[str], log_path: Path) -> None:
        self.argv = argv
        self.log_path = log_path
        self._process: Optional[subprocess.Popen] = None

    @property
    def pid(self) -> Optional[int]:
        return self._process.pid if self._process else None

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, env: Optional[dict] = None) -> None:
        """Start the server; ``env`` adds variables (LLAMA_ARG_* ones are never passed on)."""
        # LLAMA_ARG_* variables would override flags the fingerprint pins.
        environment = {key: value for key, value in os.environ.items() if not key.startswith("LLAMA_ARG_")}
        environment.update(env or {})
        with open(self.log_path, "ab") as log:
            # In this session (spawn_child): states kept off the answer's path at a low
            # priority yield to its prefill.
            self._process = spawn_child(self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                        env=environment)

    def exited_within(self, timeout: float) -> bool:
        """Whether the process has ended, waiting up to ``timeout`` seconds for it to."""
        process = self._process
        if process is None:
            return True
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def log_tail(self, n_lines: int = 12) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n_lines:])
        except OSError:
            return ""

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)


def probe_system_info(binary: Path) -> str:
    """The native system info a llama-server binary reports, as ``llama_print_system_info``.

    The server logs it (at trace verbosity) before it loads a model, so a run with no
    usable model prints it and exits at once.
    """
    try:
        done = subprocess.run(
            [str(binary), "-lv", "4", "-m", os.devnull, "--port", "0"],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ServerError(f"{binary} did not run: {exc}") from None
    for line in (done.stdout + done.stderr).splitlines():
        if "system_info:" in line:
            info = line.split("system_info:", 1)[1]
            return info.split(" | ", 1)[1].strip() if " | " in info else info.strip()
    return ""


# What llama.cpp prints as it parses ``-ngl`` (every server is given it) where it cannot offload
# to a GPU: where ``llama_supports_gpu_offload()``, which the in-process engine asks, is false.
_NO_GPU_OFFLOAD = "--gpu-layers option will be ignored"


def supports_gpu_offload(log: Optional[str]) -> bool:
    """Whether a started server's llama.cpp can offload to a GPU: its ``log`` (since it started)
    has no warning that ``-ngl`` is ignored. A server attached by URL (no log here) reports no
    devices: it is taken to, so its ``n_gpu_layers`` alone decides its backend."""
    return log is None or _NO_GPU_OFFLOAD not in log


def server_fingerprint(
    binary: Optional[Path], build: str, *, started: bool, model_path: Path, settings: EngineSettings,
    sliding_window: int, n_slots: int, gpu_offload: bool = False, kv_unified: bool = False,
) -> "RuntimeFingerprint":
    """The runtime fingerprint of blocks captured through a llama-server.

    The cached build is compiled from the installed llama-cpp-python's own llama.cpp
    sources, so it runs the same native code as the in-process engine and shares its
    fingerprint. Any other server is named by its build string (and, when started here,
    its binary's hash). ``gpu_offload``: whether the server supports GPU offload
    (:func:`supports_gpu_offload`); the backend follows from it as in-process. ``kv_unified``:
    its slots share one KV stream (an attached server started so; a started one never does).
    """
    from ..core.fingerprint import RuntimeFingerprint, backend_of, file_sha256
    from .build import cached_build, llama_cpp_python_version

    own_build = cached_build()
    same_sources = (
        started
        and own_build is not None
        and Path(binary).resolve() == own_build.binary.resolve()
        and own_build.llama_cpp_python == llama_cpp_python_version()
    )
    if same_sources:
        runtime, system_info = own_build.llama_cpp_python, probe_system_info(binary)
    else:
        runtime = f"llama-server {build}"
        if binary is not None:
            runtime += f" sha256:{file_sha256(Path(binary))[:16]}"
        system_info = ""
    return RuntimeFingerprint(
        gguf_sha256=file_sha256(model_path),
        llama_cpp_python=runtime,
        system_info=system_info or runtime,
        n_batch=settings.n_batch,
        n_ubatch=settings.n_ubatch,
        type_k=settings.type_k,
        type_v=settings.type_v,
        flash_attn=settings.flash_attn,
        swa_full=sliding_window > 0,
        n_seq_max=n_slots,
        kv_unified=n_slots > 1 and kv_unified,
        n_gpu_layers=settings.n_gpu_layers,
        backend=backend_of(settings.n_gpu_layers, gpu_offload),
    )
