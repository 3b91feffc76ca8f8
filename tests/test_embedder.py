"""The ONNX Runtime path of the MiniLM embedder: same vectors as sentence-transformers, exported once."""

from __future__ import annotations

import numpy as np
import pytest

from skillgraft.routing.embedder import Embedder, onnx_cache_dir
from skillgraft.errors import ConfigError

pytestmark = pytest.mark.model

TEXTS = [
    "how do I squash my last three commits?",
    "ok",
    "translate 'the meeting is moved to Thursday afternoon' into French, keeping it formal " * 3,
    "word " * 400,  # past the 256-token window: truncated the same way
]


def test_onnx_and_sentence_transformers_give_the_same_vectors(tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLGRAFT_CACHE_DIR", str(tmp_path))
    onnx = Embedder(runtime="onnx")
    fast = onnx.encode(TEXTS)
    assert onnx.runtime_used == "onnx" and len(list(onnx_cache_dir().glob("minilm-*.onnx"))) == 1
    reference = Embedder(runtime="sentence-transformers").encode(TEXTS)
    assert fast.shape == reference.shape == (len(TEXTS), 384)
    assert float(np.abs(fast - reference).max()) < 1e-5
    assert np.allclose(np.linalg.norm(fast, axis=1), 1.0, atol=1e-5)
    single = [onnx.encode([t])[0] for t in TEXTS]  # unpadded one by one equals the padded batch
    assert float(np.abs(np.stack(single) - fast).max()) < 1e-5


def test_a_bulk_on_two_threads_gives_each_text_its_vector_alone():
    embedder = Embedder(runtime="onnx")
    texts = [f"step {n}: " + "check the migration and its index " * (n % 9) for n in range(70)] + TEXTS
    bulk = embedder.encode_bulk(texts, workers=2)
    single = np.stack([embedder.encode([t])[0] for t in texts])
    assert bulk.shape == single.shape and float(np.abs(bulk - single).max()) < 1e-5
    few = TEXTS[:3] + ["short key", "a skill's description, a sentence or two of what it is for"]  # one batch, cut in two
    alone = np.stack([embedder.encode([t])[0] for t in few])
    assert float(np.abs(embedder.encode_bulk(few, workers=2) - alone).max()) < 1e-5


def test_a_damaged_export_is_made_again(tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLGRAFT_CACHE_DIR", str(tmp_path))
    first = Embedder(runtime="onnx").encode(["hello"])
    (exported,) = onnx_cache_dir().glob("minilm-*.onnx")
    exported.write_bytes(b"not a model")
    again = Embedder(runtime="onnx")
    assert float(np.abs(again.encode(["hello"]) - first).max()) < 1e-6 and again.runtime_used == "onnx"
    assert exported.stat().st_size > 1_000_000


def test_a_failed_export_raises_for_onnx_and_falls_back_for_auto(tmp_path, monkeypatch):
    import skillgraft.routing.embedder as module

    def fail(folder, target):
        raise RuntimeError("no exporter here")

    monkeypatch.setenv("SKILLGRAFT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(module, "_export_onnx", fail)
    with pytest.raises(ConfigError, match="no exporter here"):
        Embedder(runtime="onnx").encode(["hello"])
    auto = Embedder()
    assert auto.encode(["hello"]).shape == (1, 384) and auto.runtime_used == "sentence-transformers"
