"""Shared fixtures: one real engine per model per session, temp stores, the CLI runner."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def smollm2():
    from skillgraft.engine import Engine

    with Engine("smollm2-135m") as engine:
        yield engine


@pytest.fixture(scope="session")
def gemma3():
    from skillgraft.engine import Engine

    with Engine("gemma3-270m") as engine:
        yield engine


@pytest.fixture
def runner():
    return CliRunner()


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A fresh store folder, also exported as SKILLGRAFT_HOME for the CLI."""
    folder = tmp_path / "store"
    monkeypatch.setenv("SKILLGRAFT_HOME", str(folder))
    return folder
