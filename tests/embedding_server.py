"""A real llama-server serving embeddings, for the endpoint encoder's tests.

The GGUF is made from the packaged MiniLM by the converter vendored in the llama.cpp sources
of the installed llama-cpp-python (``convert_hf_to_gguf.py`` and ``gguf-py``, taken from
that version's sdist as :mod:`skillgraft.server.build` takes the server's sources), once,
and cached beside the server binary::

    $SKILLGRAFT_CACHE_DIR/gguf/minilm-<weights digest>-f32.gguf

The server (the built ``llama-server``) runs with ``--embeddings --pooling mean`` on a free
loopback port and is stopped by its own PID.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx

from skillgraft.routing.embedder import Embedder, _weights_digest
from skillgraft.server.build import cache_root, find_server, llama_cpp_python_version
from skillgraft.server.process import ServerProcess, free_port

CONVERTER_PARTS = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/")


def _unpack_converter(sdist: Path, into: Path) -> Path:
    """Extract the converter and gguf-py (plain files only, inside ``into``); the llama.cpp folder."""
    root = into.resolve()
    with tarfile.open(sdist) as archive:
        members = []
        for member in archive.getmembers():
            parts = Path(member.name).parts
            if len(parts) < 4 or parts[1:3] != ("vendor", "llama.cpp") or not member.isfile():
                continue
            inner = "/".join(parts[3:])
            if inner == CONVERTER_PARTS[0] or inner.startswith(CONVERTER_PARTS[1:]):
                if not (root / member.name).resolve().is_relative_to(root):
                    raise RuntimeError(f"unsafe path {member.name!r} in {sdist.name}")
                members.append(member)
        archive.extractall(root, members=members, filter="data")
    (source,) = root.glob("*/vendor/llama.cpp")
    return source


def minilm_gguf() -> Path:
    """The packaged MiniLM as an f32 GGUF, converted once and cached."""
    folder = Embedder().folder()
    target = cache_root() / "gguf" / f"minilm-{_weights_digest(folder)}-f32.gguf"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gguf-", dir=target.parent) as work:
        work_dir = Path(work)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", f"llama-cpp-python=={llama_cpp_python_version()}",
             "--no-binary", ":all:", "--no-deps", "--quiet", "-d", str(work_dir / "sdist")],
            check=True, capture_output=True,
        )
        (sdist,) = (work_dir / "sdist").glob("*.tar.gz")
        llama_cpp = _unpack_converter(sdist, work_dir / "src")
        part = work_dir / "minilm.gguf"
        env = {**os.environ, "PYTHONPATH": str(llama_cpp / "gguf-py"), "HF_HUB_OFFLINE": "1"}
        done = subprocess.run(
            [sys.executable, str(llama_cpp / "convert_hf_to_gguf.py"), str(folder), "--outfile", str(part),
             "--outtype", "f32"], env=env, capture_output=True, text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"convert_hf_to_gguf.py failed: {done.stderr[-1500:]}")
        os.replace(part, target)
    return target


@contextmanager
def embedding_server(gguf: Path, log_dir: Path, *, alias: str = "all-minilm-l6-v2") -> Iterator[str]:
    """A llama-server with ``--embeddings`` on ``gguf``; yields its base URL (``…/v1``)."""
    port = free_port()
    argv = [str(find_server()), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port), "--embeddings",
            "--pooling", "mean", "-a", alias, "-c", "512", "-b", "512", "-ub", "512", "-t", "1", "-np", "1",
            "--no-webui"]
    process = ServerProcess(argv, log_dir / "embedding-server.log")
    process.start()
    try:
        deadline = time.monotonic() + 120
        while True:
            if not process.alive:
                raise RuntimeError(f"llama-server --embeddings exited: {process.log_tail()}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2, trust_env=False).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama-server --embeddings did not come up: {process.log_tail()}")
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.stop()
