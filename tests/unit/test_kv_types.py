"""The KV cache type as a runtime choice, without a model: the settings one type implies, the
environment variable, the fingerprint it leaves (in process and for llama-server), and the
``--kv-type`` option of ``verify`` and ``bench``."""

from __future__ import annotations

import json
import sys
import types

import pytest

from skillgraft.cli.main import cli
from skillgraft.config import KV_TYPES, EngineSettings, engine_settings, kv_type_settings
from skillgraft.core.fingerprint import RuntimeFingerprint
from skillgraft.errors import ConfigError, FingerprintMismatchError

F16 = {
    "gguf_sha256": "0" * 64, "llama_cpp_python": "0.3.36", "system_info": "x", "n_ctx": 4096,
    "n_batch": 512, "n_ubatch": 512, "type_k": "f16", "type_v": "f16", "flash_attn": False, "swa_full": False,
}


def test_one_kv_type_sets_keys_and_values_and_a_quantized_one_flash_attention():
    assert KV_TYPES == ("f16", "f32", "q8_0")
    assert kv_type_settings(None) == {}
    assert kv_type_settings("f32") == {"type_k": "f32", "type_v": "f32"}
    assert kv_type_settings("q8_0") == {"type_k": "q8_0", "type_v": "q8_0", "flash_attn": True}
    settings = engine_settings(**kv_type_settings("q8_0"))
    assert (settings.type_k, settings.type_v, settings.flash_attn) == ("q8_0", "q8_0", True)
    with pytest.raises(ConfigError, match="unknown KV cache type 'q4_0'"):
        kv_type_settings("q4_0")


def test_a_quantized_v_cache_without_flash_attention_is_a_config_error():
    # llama.cpp itself only refuses to create the context; the setting says why first.
    for make in (EngineSettings, engine_settings):
        with pytest.raises(ConfigError, match="q8_0 V cache needs flash_attn=True"):
            make(type_k="q8_0", type_v="q8_0")
    assert EngineSettings(type_k="q8_0").type_v == "f16"  # a quantized K cache alone needs nothing


def test_the_environment_chooses_the_kv_type_and_an_argument_wins(monkeypatch):
    monkeypatch.setenv("SKILLGRAFT_KV_TYPE", "q8_0")
    settings = engine_settings()
    assert (settings.type_k, settings.type_v, settings.flash_attn) == ("q8_0", "q8_0", True)
    assert engine_settings(**kv_type_settings("f16")).type_v == "f16"
    monkeypatch.setenv("SKILLGRAFT_KV_TYPE", "int4")
    with pytest.raises(ConfigError, match="SKILLGRAFT_KV_TYPE must be one of f16, f32, q8_0, got 'int4'"):
        engine_settings()


def test_the_environment_turns_flash_attention_on_or_off(monkeypatch):
    assert engine_settings().flash_attn is False
    monkeypatch.setenv("SKILLGRAFT_FLASH_ATTN", "on")
    assert engine_settings().flash_attn is True
    assert engine_settings(flash_attn=False).flash_attn is False  # an argument wins
    monkeypatch.setenv("SKILLGRAFT_FLASH_ATTN", "auto")
    with pytest.raises(ConfigError, match="SKILLGRAFT_FLASH_ATTN must be on or off, got 'auto'"):
        engine_settings()
    monkeypatch.setenv("SKILLGRAFT_FLASH_ATTN", "off")
    monkeypatch.setenv("SKILLGRAFT_KV_TYPE", "q8_0")  # a quantized V cache needs it on: said, not overridden
    with pytest.raises(ConfigError, match="q8_0 V cache needs flash_attn=True"):
        engine_settings()


def test_a_block_of_another_kv_type_is_refused_naming_the_types():
    f16 = RuntimeFingerprint.model_validate(F16)
    q8_0 = RuntimeFingerprint.model_validate({**F16, **kv_type_settings("q8_0")})
    assert f16.id != q8_0.id
    with pytest.raises(FingerprintMismatchError) as caught:
        q8_0.require_equal(f16, block_id="b1")
    assert set(caught.value.differences) == {"type_k", "type_v", "flash_attn"}
    assert "type_k" in str(caught.value) and "q8_0" in str(caught.value)


def test_the_server_is_started_with_the_kv_type_and_its_fingerprint_records_it(tmp_path):
    from skillgraft.server.process import server_argv, server_fingerprint

    settings = engine_settings(**kv_type_settings("q8_0"))
    argv = server_argv("llama-server", "m.gguf", settings, port=1, slot_dir="d")
    assert argv[argv.index("-ctk") + 1] == "q8_0" and argv[argv.index("-ctv") + 1] == "q8_0"
    assert argv[argv.index("-fa") + 1] == "on"
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    prints = {
        kv: server_fingerprint(None, "b1", started=False, model_path=model, settings=engine_settings(**kv_type_settings(kv)),
                               sliding_window=0, n_slots=1)
        for kv in ("f16", "q8_0")
    }
    assert (prints["q8_0"].type_k, prints["q8_0"].type_v, prints["q8_0"].flash_attn) == ("q8_0", "q8_0", True)
    assert set(prints["f16"].differences(prints["q8_0"])) == {"type_k", "type_v", "flash_attn"}


def _report(settings: EngineSettings) -> dict:
    fingerprint = {**F16, "type_k": settings.type_k, "type_v": settings.type_v, "flash_attn": settings.flash_attn}
    comparison = {"samples": 1, "sha_equal": 1, "argmax_mismatch": 0, "kl_median": 0.0, "kl_p99": 0.0}
    return {
        "model": "fake", **comparison, "concat": comparison, "derived": comparison,
        "negative_control": {"kind": "graft shifted by one position", **comparison, "sha_equal": 0, "kl_median": 1.0},
        "bytes_per_token": 12252, "kv_bytes_per_token": 12240.0, "fingerprint": {"id": "f", **fingerprint},
    }


def test_verify_checks_within_the_runtime_of_the_kv_type_it_names(runner, monkeypatch):
    seen = []

    def fake_verify(model, samples, *, seed, settings, progress):
        seen.append(settings)
        return _report(settings)

    monkeypatch.setitem(sys.modules, "skillgraft.verify.exactness", types.SimpleNamespace(verify=fake_verify))
    result = runner.invoke(cli, ["verify", "--kv-type", "q8_0", "--samples", "1"])
    assert result.exit_code == 0, result.output
    assert (seen[0].type_k, seen[0].type_v, seen[0].flash_attn) == ("q8_0", "q8_0", True)
    assert "K q8_0, V q8_0, flash attention on" in result.stdout
    result = runner.invoke(cli, ["verify", "--samples", "1", "--json"])
    assert json.loads(result.stdout)["fingerprint"]["type_k"] == "f16" and seen[1].type_v == "f16"


def test_verify_through_llama_server_starts_both_engines_under_the_kv_type(runner, monkeypatch):
    started = []

    class FakeEngine:
        def __init__(self, model, settings):
            started.append((type(self).__name__, settings))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    server_engine = type("LlamaServerEngine", (FakeEngine,), {})
    in_process = type("Engine", (FakeEngine,), {})
    report = types.SimpleNamespace(to_dict=lambda: {"samples": 1, "sha_equal": 1})
    monkeypatch.setitem(sys.modules, "skillgraft.engine.llama", types.SimpleNamespace(Engine=in_process))
    monkeypatch.setitem(sys.modules, "skillgraft.server.engine", types.SimpleNamespace(LlamaServerEngine=server_engine))
    monkeypatch.setitem(sys.modules, "skillgraft.server.checks", types.SimpleNamespace(verify_server=lambda *a, **k: report))
    result = runner.invoke(cli, ["verify", "--engine", "server", "--kv-type", "q8_0", "--samples", "1", "--json"])
    assert result.exit_code == 0, result.output
    assert [name for name, _ in started] == ["LlamaServerEngine", "Engine"]
    assert all((s.type_k, s.type_v, s.flash_attn) == ("q8_0", "q8_0", True) for _, s in started)


def test_an_unknown_kv_type_or_one_for_a_benchmark_that_ignores_it_is_a_usage_error(runner):
    assert runner.invoke(cli, ["verify", "--kv-type", "q4_0"]).exit_code == 2
    result = runner.invoke(cli, ["bench", "route", "--kv-type", "q8_0"])
    assert result.exit_code == 2 and "No such option '--kv-type'" in result.output
