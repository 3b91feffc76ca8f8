"""Build and locate ``llama-server`` from the llama.cpp sources of the installed llama-cpp-python.

The in-process engine runs the llama.cpp vendored in the installed llama-cpp-python; the
server must run the same sources, or their KV states and logits are not comparable. So the
server is built from that version's sdist (``vendor/llama.cpp``), with llama.cpp's own
defaults (native CPU code, Release), as one static binary.

The binary is cached once per llama-cpp-python version and CPU feature set::

    $SKILLGRAFT_CACHE_DIR (default $XDG_CACHE_HOME/skillgraft or ~/.cache/skillgraft)
      llama-server/<llama-cpp-python version>-<cpu key>/
        llama-server      the binary
        build.json        version, CPU key, llama.cpp build, CMake flags, build seconds

``SKILLGRAFT_LLAMA_SERVER`` names an existing binary instead (then nothing is built).
``make server`` (``scripts/build_llama_server.py``) builds it; a no-op when the cache holds it.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Optional

from ..errors import ServerBuildError

BINARY_ENV = "SKILLGRAFT_LLAMA_SERVER"
CACHE_ENV = "SKILLGRAFT_CACHE_DIR"
BINARY_NAME = "llama-server"
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_CURL=OFF",
)


@dataclass(frozen=True)
class ServerBuild:
    """A cached ``llama-server`` and how it was made."""

    binary: Path
    llama_cpp_python: str
    cpu_key: str
    llama_cpp_build: str
    build_s: float
    cmake_flags: tuple[str, ...] = CMAKE_FLAGS



def llama_cpp_python_version() -> str:
    """The installed llama-cpp-python version, read without loading llama.cpp."""
    try:
        return metadata.version("llama-cpp-python")
    except metadata.PackageNotFoundError:
        raise ServerBuildError("llama-cpp-python is not installed: install skillgraft first") from None


def cpu_key() -> str:
    """12 hex digits naming the machine architecture and its CPU feature flags."""
    flags = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                flags = " ".join(sorted(line.split(":", 1)[1].split()))
                break
    except OSError:
        flags = platform.processor()
    return hashlib.sha256(f"{platform.machine()}|{flags}".encode()).hexdigest()[:12]


def cache_root() -> Path:
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(base).expanduser() / "skillgraft"


def cache_dir(version: Optional[str] = None) -> Path:
    """The cache folder for this llama-cpp-python version on this CPU."""
    return cache_root() / BINARY_NAME / f"{version or llama_cpp_python_version()}-{cpu_key()}"


def binary_version(binary: Path) -> str:
    """The llama.cpp build a binary reports (``--version``), e.g. ``b11312 (0c1e570)``."""
    try:
        done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ServerBuildError(f"{binary} does not run: {exc}") from None
    for line in (done.stdout + done.stderr).splitlines():
        if line.startswith("version:"):
            return line.split(":", 1)[1].strip()
    raise ServerBuildError(f"{binary} --version printed no version (exit {done.returncode})")


def find_server() -> Path:
    """The llama-server to run: ``$SKILLGRAFT_LLAMA_SERVER`` or the cached build."""
    configured = os.environ.get(BINARY_ENV)
    if configured:
        path = Path(configured).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ServerBuildError(f"{BINARY_ENV}={configured} is not an executable file")
        return path
    path = cache_dir() / BINARY_NAME
    if not path.is_file():
        raise ServerBuildError(
            f"no llama-server built for llama-cpp-python {llama_cpp_python_version()} on this CPU "
            f"(looked for {path}): run `make server` or `python scripts/build_llama_server.py`"
        )
    return path


def cached_build() -> Optional[ServerBuild]:
    """The cached build's record, or None when there is none (or it is incomplete)."""
    folder = cache_dir()
    try:
        record = json.loads((folder / "build.json").read_text())
        build = ServerBuild(
            binary=folder / BINARY_NAME,
            llama_cpp_python=record["llama_cpp_python"],
            cpu_key=record["cpu_key"],
            llama_cpp_build=record["llama_cpp_build"],
            build_s=float(record["build_s"]),
            cmake_flags=tuple(record["cmake_flags"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return build if build.binary.is_file() else None


def _run(command: list[str], log, cwd: Optional[Path] = None) -> None:
    log.write(f"$ {' '.join(command)}\n")
    log.flush()
    done = subprocess.run(command, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise ServerBuildError(f"`{' '.join(command[:4])} ...` failed (exit {done.returncode}); see {log.name}")


def _unpack_vendored_sources(sdist: Path, into: Path) -> Path:
    """Extract ``*/vendor/llama.cpp/**`` only, refusing links and paths that leave ``into``."""
    root = into.resolve()
    with tarfile.open(sdist) as archive:
        members = []
        for member in archive.getmembers():
            parts = Path(member.name).parts
            if len(parts) < 3 or parts[1:3] != ("vendor", "llama.cpp"):
                continue
            if member.issym() or member.islnk() or not (member.isfile() or member.isdir()):
                continue
            if not (root / member.name).resolve().is_relative_to(root):
                raise ServerBuildError(f"{sdist.name} holds an unsafe path {member.name!r}")
            members.append(member)
        if hasattr(tarfile, "data_filter"):
            archive.extractall(root, members=members, filter="data")
        else:
            archive.extractall(root, members=members)
    sources = [p for p in root.glob("*/vendor/llama.cpp") if (p / "CMakeLists.txt").is_file()]
    if len(sources) != 1:
        raise ServerBuildError(f"{sdist.name} has no vendor/llama.cpp/CMakeLists.txt")
    return sources[0]


def build_server(jobs: Optional[int] = None, force: bool = False, log_path: Optional[Path] = None) -> ServerBuild:
    """Build llama-server into the cache unless it is already there; return its record."""
    existing = None if force else cached_build()
    if existing is not None:
        return existing
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise ServerBuildError(f"building llama-server needs {tool} on PATH")
    version = llama_cpp_python_version()
    folder = cache_dir(version)
    folder.mkdir(parents=True, exist_ok=True)
    log_path = log_path or folder / "build.log"
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="llama-server-build-", dir=folder) as work, open(log_path, "w") as log:
        work_dir = Path(work)
        _run(
            [sys.executable, "-m", "pip", "download", f"llama-cpp-python=={version}", "--no-binary", ":all:",
             "--no-deps", "-d", str(work_dir / "sdist")],
            log,
        )
        sdists = list((work_dir / "sdist").glob("*.tar.gz"))
        if len(sdists) != 1:
            raise ServerBuildError(f"pip download gave {len(sdists)} sdists for llama-cpp-python=={version}")
        sources = _unpack_vendored_sources(sdists[0], work_dir / "src")
        build_dir = work_dir / "build"
        _run(["cmake", "-S", str(sources), "-B", str(build_dir), *CMAKE_FLAGS], log)
        _run(
            ["cmake", "--build", str(build_dir), "--target", BINARY_NAME, "-j", str(jobs or os.cpu_count() or 1)],
            log,
        )
        built = build_dir / "bin" / BINARY_NAME
        if not built.is_file():
            raise ServerBuildError(f"the build finished without {built}; see {log_path}")
        staged = folder / f".{BINARY_NAME}.tmp"
        shutil.copy2(built, staged)
        os.replace(staged, folder / BINARY_NAME)
    build = ServerBuild(
        binary=folder / BINARY_NAME,
        llama_cpp_python=version,
        cpu_key=cpu_key(),
        llama_cpp_build=binary_version(folder / BINARY_NAME),
        build_s=round(time.perf_counter() - started, 1),
    )
    record = {**asdict(build), "binary": str(build.binary), "cmake_flags": list(build.cmake_flags)}
    (folder / "build.json").write_text(json.dumps(record, indent=2) + "\n")
    return build
