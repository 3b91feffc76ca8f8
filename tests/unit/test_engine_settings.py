"""Engine settings and the fingerprints they leave, without a model: bad settings are config
errors, and a fingerprint recorded with a thread count still loads."""

from __future__ import annotations

import pytest

from skillgraft.config import engine_settings
from skillgraft.core.fingerprint import RuntimeFingerprint
from skillgraft.errors import ConfigError


def test_bad_settings_are_config_errors():
    with pytest.raises(ConfigError, match="n_ubatch"):
        engine_settings(n_batch=128, n_ubatch=512)
    with pytest.raises(ConfigError, match="n_ctx"):
        engine_settings(n_ctx=0)


def test_old_fingerprints_with_a_thread_count_still_load():
    data = {
        "gguf_sha256": "0" * 64, "llama_cpp_python": "0.3.36", "system_info": "x", "n_ctx": 4096,
        "n_batch": 512, "n_ubatch": 512, "n_threads": 2, "type_k": "f16", "type_v": "f16",
        "flash_attn": False, "swa_full": False,
    }
    old = RuntimeFingerprint.model_validate(data)
    assert "n_threads" not in old.canonical_json()
    assert old == RuntimeFingerprint.model_validate({**data, "n_threads": 1})


def test_the_models_window_is_divided_among_a_servers_slots_unless_one_is_given():
    """As llama-server's default (``-c 0 -np K``) divides the model's window: each slot of a
    K-slot server its share (a multiple of 256), the KV memory of one slot of the whole window."""
    from skillgraft.config import DEFAULT_CONTEXT_CAP, EngineSettings

    assert EngineSettings().for_model(32768).n_ctx == 32768
    assert EngineSettings().for_model(8192, slots=2).n_ctx == 4096
    assert EngineSettings().for_model(65536, slots=4).n_ctx == DEFAULT_CONTEXT_CAP // 4
    assert EngineSettings().for_model(8192, slots=3).n_ctx == 2816  # 2,730 padded up to 256
    assert EngineSettings().for_model(8192, slots=64).n_ctx == 256  # never below one padding
    assert EngineSettings(n_ctx=8192).for_model(32768, slots=4).n_ctx == 8192  # given: each slot's
