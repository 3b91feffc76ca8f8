"""The q8_0 KV cache on the real models: ``verify --kv-type q8_0`` exact within that runtime on
both embedded models (SmolLM2, and Gemma 3 with its sliding-window layers), in process and
through llama-server; and a block of one cache type refused by a runtime of the other."""

from __future__ import annotations

import json

import pytest

from skillgraft.cli.main import cli
from skillgraft.config import engine_settings, kv_type_settings
from skillgraft.errors import FingerprintMismatchError

pytestmark = [pytest.mark.model, pytest.mark.slow]  # the CLI loads the real models itself

MODELS = ["smollm2-135m", "gemma3-270m"]
TEXT = "Skill manual: squashing commits with git. Run git rebase -i HEAD~N and squash the rest. " * 4
# q8_0 stores 32 values in 34 bytes; f16 32 in 64.
Q8_0_PER_F16 = 34 / 64


def _verify(runner, *args) -> dict:
    result = runner.invoke(cli, ["verify", "--kv-type", "q8_0", "--samples", "2", "--json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("model", MODELS)
def test_verify_q8_0_is_exact_within_its_runtime(runner, model):
    report = _verify(runner, "--model", model)
    fingerprint = report["fingerprint"]
    assert (fingerprint["type_k"], fingerprint["type_v"], fingerprint["flash_attn"]) == ("q8_0", "q8_0", True)
    assert fingerprint["swa_full"] is (model == "gemma3-270m")
    assert (report["samples"], report["sha_equal"], report["argmax_mismatch"], report["kl_p99"]) == (2, 2, 0, 0.0)
    assert report["derived"]["sha_equal"] == report["derived"]["samples"] == 2
    control = report["negative_control"]
    assert control["samples"] == 2 and control["sha_equal"] < control["samples"]
    f16_kv = {"smollm2-135m": 30 * 3 * 64 * 2 * 2, "gemma3-270m": 18 * 1 * 256 * 2 * 2}[model]
    assert report["kv_bytes_per_token"] == f16_kv * Q8_0_PER_F16
    assert 0 <= report["bytes_per_token"] - report["kv_bytes_per_token"] <= 24


@pytest.mark.server
@pytest.mark.parametrize("model", MODELS)
def test_verify_q8_0_through_llama_server(runner, model):
    from tests.required import require_llama_server

    require_llama_server()
    report = _verify(runner, "--engine", "server", "--model", model)
    assert report["sha_equal"] == 2 and report["argmax_mismatch"] == 0
    assert report["round_trip_equal"] and report["cache_n_ok"]
    assert report["in_process"]["capture_bytes_equal"] == 2  # the server's q8_0 blocks are the engine's
    argv = report["server"]["argv"]
    assert argv[argv.index("-ctk") + 1] == argv[argv.index("-ctv") + 1] == "q8_0" and argv[argv.index("-fa") + 1] == "on"
    assert report["fingerprint"]["type_v"] == "q8_0"
    assert report["negative_control"]["sha_equal"] == 0


@pytest.mark.server
@pytest.mark.parametrize("model", MODELS)
def test_flash_attention_on_is_exact_through_llama_server(runner, model, monkeypatch):
    from tests.required import require_llama_server

    require_llama_server()
    monkeypatch.setenv("SKILLGRAFT_FLASH_ATTN", "on")
    result = runner.invoke(cli, ["verify", "--engine", "server", "--model", model, "--samples", "2", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["sha_equal"] == 2 and report["argmax_mismatch"] == 0 and report["round_trip_equal"]
    assert report["in_process"]["capture_bytes_equal"] == 2  # the server's blocks are the engine's, both with it on
    argv = report["server"]["argv"]
    assert argv[argv.index("-fa") + 1] == "on" and report["fingerprint"]["flash_attn"] is True
    assert report["fingerprint"]["type_v"] == "f16" and report["negative_control"]["sha_equal"] == 0


def test_a_block_of_one_kv_type_is_refused_by_a_runtime_of_the_other(smollm2):
    from skillgraft.engine.llama import Engine

    query = smollm2.tokenize(" Question: how?", add_bos=False)
    f16_state = smollm2.capture(TEXT)
    with Engine("smollm2-135m", engine_settings(**kv_type_settings("q8_0"))) as q8_0:
        state = q8_0.capture(TEXT)
        assert state.tokens == f16_state.tokens and len(state.payload) < 0.6 * len(f16_state.payload)
        with pytest.raises(FingerprintMismatchError, match="type_k") as caught:
            q8_0.graft(f16_state, query)
    assert set(caught.value.differences) == {"type_k", "type_v", "flash_attn"}
    with pytest.raises(FingerprintMismatchError, match="type_v"):
        smollm2.graft(state, query, "q8-block")
    assert smollm2.graft(f16_state, query).shape == (smollm2.n_vocab,)  # the engine is unharmed
