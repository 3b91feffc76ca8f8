"""Shared fixtures: one real engine per model per session, temp stores, the CLI runner."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def smollm2():
    from skillgraft.engine.llama import Engine

    with Engine("smollm2-135m") as engine:
        yield engine


@pytest.fixture(scope="session")
def gemma3():
    from skillgraft.engine.llama import Engine

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


@pytest.fixture(scope="session")
def embedder():
    from skillgraft.routing.router import Embedder

    return Embedder()


@pytest.fixture
def memory(tmp_path, smollm2, embedder):
    """A SkillMemory on a fresh store, sharing the session's engine and embedder."""
    from skillgraft.memory import SkillMemory

    with SkillMemory(tmp_path / "store", engine=smollm2, embedder=embedder) as mem:
        yield mem


GIT_MANUAL = (
    "Skill manual: squashing commits with git. Run git rebase -i HEAD~N, keep the first line as pick "
    "and change the others to squash. Push with git push --force-with-lease."
)
SOURDOUGH_MANUAL = (
    "Skill manual: baking sourdough bread. Feed the starter, mix flour and water, rest, add salt, "
    "fold every half hour, shape, proof overnight in the fridge and bake covered at 250 C."
)


@pytest.fixture
def stocked(memory):
    """A memory with two manuals and one verified solution."""
    memory.add_manual("git-squash", GIT_MANUAL, examples=["how do I squash my last commits?", "combine commits into one"])
    memory.add_manual("sourdough", SOURDOUGH_MANUAL, examples=["how do I bake sourdough bread?", "my loaf is too dense"])
    memory.add_solution("What is 17 * 23?", "391", method="print(17 * 23)", verifier="python")
    return memory
