"""The 0.5B coder model, chosen by name: assembled from its chunk packages, exact when grafted
in-process and through llama-server, and one conformance case (the in-process memory and the
gateway give the same graft). Kept to a handful of tokens: the model is slow on 2 cores."""

from __future__ import annotations

import json

import pytest

from tests.conftest import GIT_MANUAL
from tests.required import require_llama_server

MODEL = "qwen2.5-coder-0.5b"
QUESTION = "How can I squash my last three commits into one?"
MAX_TOKENS = 6
# Seeds whose sampled prefixes are short (27 and 36 tokens; 24 through the server): every
# comparison of verify prefills them several times, and this model is slow on 2 cores.
SEED, SERVER_SEED = 186, 27

pytestmark = [pytest.mark.slow, pytest.mark.model]


@pytest.fixture(scope="module")
def qwen():
    from skillgraft.engine.llama import Engine

    with Engine(MODEL) as engine:  # the default settings: the gateway's own
        yield engine


def test_the_model_is_the_pinned_file_and_a_qwen2_chat_model(qwen):
    from skillgraft.engine.model_chunks import QWEN_CODER

    assert qwen.model_name == MODEL and qwen.model_path == QWEN_CODER.target()
    assert qwen.fingerprint.gguf_sha256 == QWEN_CODER.sha256
    assert qwen.text.metadata("general.architecture") == "qwen2"
    assert "<|im_start|>" in qwen.text.metadata("tokenizer.chat_template")


def test_verify_is_exact_in_process_and_its_control_is_not(qwen):
    from skillgraft.verify.exactness import verify

    report = verify(MODEL, 2, seed=SEED, engine=qwen, control_samples=2)
    assert (report["samples"], report["sha_equal"], report["argmax_mismatch"], report["kl_median"]) == (2, 2, 0, 0.0)
    assert report["derived"]["sha_equal"] == 2
    control = report["negative_control"]
    assert control["sha_equal"] == 0 and control["kl_median"] > 0


@pytest.mark.server
def test_verify_is_exact_through_llama_server(runner):
    from skillgraft.cli.main import cli

    require_llama_server()
    result = runner.invoke(cli, ["verify", "--engine", "server", "--model", MODEL, "--samples", "1",
                                 "--seed", str(SERVER_SEED), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["model"] == MODEL and report["sha_equal"] == 1 and report["argmax_mismatch"] == 0
    assert report["round_trip_equal"] and report["cache_n_ok"]
    assert report["in_process"]["capture_bytes_equal"] == 1


@pytest.mark.server
def test_the_memory_and_the_gateway_give_the_same_graft(qwen, embedder, tmp_path):
    import httpx

    from skillgraft.bench.serve import GatewayProcess
    from skillgraft.core.answer import AnswerOptions
    from skillgraft.core.gate import GATE_SETTING
    from skillgraft.memory import SkillMemory

    require_llama_server()
    home = tmp_path / "store"
    with SkillMemory(home, model=MODEL, engine=qwen, embedder=embedder) as memory:
        block = memory.add_manual("git-squash", GIT_MANUAL, examples=["how do I squash my last commits?"])
        memory.store.set_setting(GATE_SETTING, "-100")
        answer = memory.answer([("user", QUESTION)], AnswerOptions(max_tokens=MAX_TOKENS))
    gateway = GatewayProcess(home, servers=1, model=MODEL, log_path=tmp_path / "gateway.log")
    try:
        body = {"model": MODEL, "messages": [{"role": "user", "content": QUESTION}], "max_tokens": MAX_TOKENS,
                "temperature": 0}
        served = httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=300, trust_env=False).json()
    finally:
        assert gateway.stop() == 0
    assert "skillgraft" in served, served
    note = served["skillgraft"]
    assert (answer.note.decision, answer.note.block_id) == ("graft", block.id) == (note["decision"], note["block_id"])
    assert note["cache_n"] == block.n_tokens
    assert served["choices"][0]["message"]["content"].strip() == answer.text.strip() != ""
    assert served["usage"]["completion_tokens"] == answer.end.completion_tokens


def test_a_multi_topic_conversation_with_tools_is_placed_exactly_on_its_template(qwen, embedder, tmp_path):
    from tests.test_agent_ready import placed_conversation_is_exact

    placed_conversation_is_exact(qwen, embedder, tmp_path / "qwen")
