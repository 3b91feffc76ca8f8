"""A chat GGUF given by path, outside the embedded catalog, through every door.

The model is made here: the embedded SmolLM2 re-quantized (Q4_1 to Q8_0) by llama.cpp's own
quantizer (``llama_model_quantize``, what the ``llama-quantize`` tool runs) into a temporary
folder. Its weights, file and fingerprint are its own, so the model-by-path code runs for real:
capture, graft, ``verify`` in-process and through llama-server, ``serve --model PATH`` and
``mcp --model PATH``.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.conftest import GIT_MANUAL

IN_DOMAIN = "How do I squash my last three commits with git?"
MODEL_NAME = "my-model-q8_0"


@pytest.fixture(scope="module")
def own_gguf(tmp_path_factory) -> Path:
    import llama_cpp

    from skillgraft.engine.models import resolve_model
    from skillgraft.engine.native import init_backend

    init_backend()  # llama.cpp's log goes to logging, not stderr
    _, source = resolve_model("smollm2-135m")
    target = tmp_path_factory.mktemp("models") / f"{MODEL_NAME}.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0
    params.allow_requantize = True
    params.nthread = 1
    assert llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), params) == 0
    return target


@pytest.fixture(scope="module")
def own_engine(own_gguf):
    from skillgraft.engine.llama import Engine

    with Engine(str(own_gguf)) as engine:
        yield engine


@pytest.fixture(scope="module")
def own_store(tmp_path_factory, own_engine, embedder):
    """A store whose manual was captured in-process under the model given by path."""
    from skillgraft.memory import SkillMemory

    home = tmp_path_factory.mktemp("own") / "store"
    with SkillMemory(home, engine=own_engine, embedder=embedder) as memory:
        block = memory.add_manual("git-squash", GIT_MANUAL, examples=["how do I squash my last commits?"])
    return home, block


def test_a_gguf_by_path_has_its_own_name_and_fingerprint(own_gguf, own_engine, smollm2):
    from skillgraft.core.fingerprint import file_sha256

    assert own_engine.model_name == MODEL_NAME and own_engine.model_path == own_gguf.resolve()
    assert own_engine.fingerprint.gguf_sha256 == file_sha256(own_gguf) != smollm2.fingerprint.gguf_sha256
    assert own_engine.text.metadata("tokenizer.chat_template")  # its own template, carried in the file


def test_a_gguf_by_path_captures_and_grafts_through_the_api(own_gguf, own_store, embedder):
    from skillgraft.memory import SkillMemory

    home, block = own_store
    with SkillMemory(home, model=str(own_gguf), embedder=embedder) as memory:  # the API loads it by path
        assert block.fingerprint_id == memory.engine.fingerprint.id
        answer = memory.generate(IN_DOMAIN, max_tokens=12, gate=False)
    assert answer.decision == "graft" and answer.block_id == block.id
    assert answer.prefill_tokens_avoided == block.n_tokens and answer.text


def test_verify_a_gguf_by_path_in_process(runner, own_gguf):
    from skillgraft.cli.main import cli

    result = runner.invoke(cli, ["verify", "--model", str(own_gguf), "--samples", "3", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["model"] == MODEL_NAME and report["sha_equal"] == 3 and report["argmax_mismatch"] == 0
    assert report["negative_control"]["sha_equal"] < report["negative_control"]["samples"]


@pytest.mark.server
def test_verify_a_gguf_by_path_through_llama_server(runner, own_gguf):
    from skillgraft.cli.main import cli

    from tests.required import require_llama_server

    require_llama_server()
    result = runner.invoke(cli, ["verify", "--engine", "server", "--model", str(own_gguf), "--samples", "2", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["model"] == MODEL_NAME and report["sha_equal"] == 2
    assert report["round_trip_equal"] and report["cache_n_ok"]
    assert report["in_process"]["capture_bytes_equal"] == 2
    assert str(own_gguf.resolve()) in report["server"]["argv"]


@pytest.mark.server
def test_serve_a_gguf_by_path_grafts_what_was_captured_in_process(own_gguf, own_store, tmp_path):
    from skillgraft.bench.serve import GatewayProcess

    from tests.required import require_llama_server

    require_llama_server()
    home, block = own_store
    gateway = GatewayProcess(home, servers=1, model=str(own_gguf), log_path=tmp_path / "gateway.log")
    try:
        models = httpx.get(gateway.url + "/v1/models", trust_env=False).json()
        body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": IN_DOMAIN}], "max_tokens": 8}
        response = httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=300, trust_env=False)
    finally:
        assert gateway.stop() == 0
    assert [model["id"] for model in models["data"]] == [MODEL_NAME]
    note = response.json()["skillgraft"]
    assert note["decision"] == "graft" and note["block_id"] == block.id, note
    assert note["cache_n"] == block.n_tokens


def test_mcp_with_a_gguf_by_path_grafts(own_gguf, own_store):
    from tests.test_mcp import call_tools

    home, block = own_store
    _, (answer,) = call_tools(home, [("ask", {"question": IN_DOMAIN, "max_tokens": 8})], ("--model", str(own_gguf)))
    assert not answer.is_error, answer.content
    result = answer.structured_content
    assert (result["decision"], result["block_id"], result["prefill_tokens_avoided"]) == ("graft", block.id, block.n_tokens)


@pytest.mark.parametrize("content, message", [(None, "GGUF file not found"), (b"GGUF" + b"\x00" * 64, "could not load")])
def test_a_missing_or_broken_gguf_is_a_clear_error(runner, tmp_path, content, message):
    from skillgraft.cli.main import cli

    path = tmp_path / "broken.gguf"
    if content is not None:
        path.write_bytes(content)
    result = runner.invoke(cli, ["verify", "--model", str(path), "--samples", "1"])
    assert result.exit_code == 1 and message in result.stderr and "Traceback" not in result.output
