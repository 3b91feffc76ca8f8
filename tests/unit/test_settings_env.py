"""Engine settings from the environment: every door (CLI, gateway, MCP, API) reads the same variables."""

from __future__ import annotations

import pytest

from skillgraft.config import SETTINGS_ENV, engine_settings
from skillgraft.errors import ConfigError


def test_the_environment_sets_the_context_gpu_layers_and_threads(monkeypatch):
    monkeypatch.setenv("SKILLGRAFT_N_CTX", "8192")
    monkeypatch.setenv("SKILLGRAFT_N_GPU_LAYERS", "99")
    monkeypatch.setenv("SKILLGRAFT_THREADS", "3")
    settings = engine_settings()
    assert (settings.n_ctx, settings.n_gpu_layers, settings.n_threads) == (8192, 99, 3)
    assert engine_settings(n_ctx=2048).n_ctx == 2048  # an argument wins over the environment


@pytest.mark.parametrize("variable", sorted(SETTINGS_ENV))
def test_a_bad_value_is_a_config_error_naming_the_variable(monkeypatch, variable):
    monkeypatch.setenv(variable, "lots")
    with pytest.raises(ConfigError, match=f"{variable} must be an integer, got 'lots'"):
        engine_settings()


def test_a_value_out_of_range_names_the_setting(monkeypatch):
    monkeypatch.setenv("SKILLGRAFT_N_CTX", "8")
    with pytest.raises(ConfigError, match="invalid engine setting n_ctx"):
        engine_settings()
