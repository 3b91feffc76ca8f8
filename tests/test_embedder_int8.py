"""The opt-in int8 runtime of the ONNX embedder: the same export, its weights quantised once and
cached beside it; vectors near the float ones (not equal: routing figures move, docs/routing.md)."""

from __future__ import annotations

import numpy as np
import pytest

from skillgraft.routing.embedder import Embedder, onnx_cache_dir

pytestmark = pytest.mark.model

TEXTS = [
    "how do I squash my last three commits?",
    "restore a single table from last night's postgres dump",
    "renew the TLS certificate of the api gateway",
    "what is the capital of France?",
]


def test_int8_vectors_are_unit_length_near_the_float_ones_and_keep_the_nearest(tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLGRAFT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("SKILLGRAFT_EMBEDDER_RUNTIME", "onnx-int8")
    quantised = Embedder()
    small = quantised.encode(TEXTS)
    assert quantised.runtime_used == "onnx-int8"
    assert sorted(p.name.endswith("-int8.onnx") for p in onnx_cache_dir().glob("minilm-*.onnx")) == [False, True]
    exact = Embedder(runtime="onnx").encode(TEXTS)
    assert np.allclose(np.linalg.norm(small, axis=1), 1.0, atol=1e-5)
    agreement = (small * exact).sum(axis=1)
    assert agreement.min() > 0.98 and float(np.abs(small - exact).max()) > 1e-4  # near, and not the same vectors
    queries = Embedder(runtime="onnx-int8").encode(["squash commits in git", "my certificate expires soon"])
    assert list((queries @ exact.T).argmax(axis=1)) == [0, 2]


def test_a_damaged_int8_file_is_made_again(tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLGRAFT_CACHE_DIR", str(tmp_path))
    first = Embedder(runtime="onnx-int8").encode(["hello"])
    (quantised,) = onnx_cache_dir().glob("minilm-*-int8.onnx")
    quantised.write_bytes(b"not a model")
    again = Embedder(runtime="onnx-int8")
    assert float(np.abs(again.encode(["hello"]) - first).max()) < 1e-6 and again.runtime_used == "onnx-int8"
