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
