"""The endpoint encoder against a real llama-server ``--embeddings`` serving the packaged
MiniLM as a GGUF (made by llama.cpp's own converter): its vectors against the ONNX path's,
and a store that routes, records and refuses with it."""

from __future__ import annotations

import numpy as np
import pytest

from skillgraft.errors import EncoderMismatchError, ServerBuildError
from skillgraft.memory import SkillMemory
from skillgraft.routing.encoders import make_embedder
from skillgraft.routing.reembed import reembed

from tests.conftest import GIT_MANUAL, SOURDOUGH_MANUAL
from tests.embedding_server import embedding_server, minilm_gguf
from tests.shared_servers import unavailable

TEXTS = [
    "how do I squash my last three commits?",
    "ok",
    "my sourdough loaf came out flat and dense",
    "Translate 'the meeting moved to Thursday' into French, keeping it formal.",
    "who won the football world cup in 1998?",
]
QUERIES = ["combine my recent commits into a single one", "bread did not rise in the oven", "how do I squash commits?"]


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    try:
        from skillgraft.server.build import find_server

        find_server()
    except ServerBuildError as exc:
        unavailable(f"no llama-server: {exc}")
    with embedding_server(minilm_gguf(), tmp_path_factory.mktemp("embedding-server")) as url:
        yield url


def test_endpoint_vectors_match_the_onnx_path(endpoint, embedder):
    remote = make_embedder(endpoint)
    assert remote.name == "openai:all-minilm-l6-v2"  # the one model the server lists
    served, local = remote.encode(TEXTS), embedder.encode(TEXTS)
    assert served.shape == local.shape == (len(TEXTS), 384)
    cosines = np.einsum("ij,ij->i", served, local)
    assert float(cosines.min()) > 0.9995, cosines  # llama.cpp tokenizer and kernels: equal to ~1e-6, not bitwise
    assert remote.record() == {"name": "openai:all-minilm-l6-v2", "spec": endpoint, "dimension": 384,
                               "digest": "all-minilm-l6-v2"}


def test_a_store_on_the_endpoint_routes_as_onnx_does_and_refuses_minilm(endpoint, smollm2, embedder, tmp_path):
    homes = {"endpoint": tmp_path / "endpoint", "onnx": tmp_path / "onnx"}
    routes = {}
    for kind, spec in (("endpoint", endpoint + "?model=all-minilm-l6-v2"), ("onnx", embedder)):
        with SkillMemory(homes[kind], engine=smollm2, embedder=spec) as memory:
            memory.add_manual("git-squash", GIT_MANUAL, examples=["how do I squash my last commits?"])
            memory.add_manual("sourdough", SOURDOUGH_MANUAL, examples=["how do I bake sourdough bread?"])
            routes[kind] = [memory.route(q).block.name if memory.route(q).block else None for q in QUERIES]
    assert routes["endpoint"] == routes["onnx"]  # the same vectors, the same threshold, the same routes
    assert routes["onnx"][0] == routes["onnx"][2] == "git-squash" and routes["onnx"][1] in ("sourdough", None)
    with SkillMemory(homes["endpoint"], engine=smollm2) as memory:  # no choice: the store's own endpoint
        assert memory.router.embedder.name == "openai:all-minilm-l6-v2"
    with pytest.raises(EncoderMismatchError, match="openai:all-minilm-l6-v2"):
        SkillMemory(homes["endpoint"], engine=smollm2, embedder=embedder)
    with SkillMemory(homes["endpoint"], engine=smollm2, embedder=endpoint) as memory:
        report = reembed(memory.store, embedder)
    assert report.changed and report.previous == "openai:all-minilm-l6-v2"
    with SkillMemory(homes["endpoint"], engine=smollm2, embedder=embedder) as memory:
        assert [(r.block.name if r.block else None) for r in map(memory.route, QUERIES)] == routes["onnx"]
