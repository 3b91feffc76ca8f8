"""Fixtures of the fast suite: the fakes of :mod:`skillgraft.testing`, never a real model.

The real-model fixtures of ``tests/conftest.py`` are overridden here by ones that fail, so a
unit test that asks for one says so instead of loading a model.
"""

from __future__ import annotations

import sys

import pytest

from skillgraft.memory import SkillMemory
from skillgraft.testing import FakeEmbedder, FakeEngine

GIT_MANUAL = (
    "Skill manual: squashing commits with git. Run git rebase -i HEAD~N, keep the first line as pick "
    "and change the others to squash. Push with git push --force-with-lease."
)
SOURDOUGH_MANUAL = (
    "Skill manual: baking sourdough bread. Feed the starter, mix flour and water, rest, add salt, "
    "fold every half hour, shape, proof overnight in the fridge and bake covered at 250 C."
)
QUESTION, ANSWER = "What is 17 * 23?", "391"
GIT_QUERY = "How can I squash my last three commits into one?"
OUT_OF_DOMAIN = "Who won the football world cup in 1998?"

# What the fast suite must never import (the real-model suite in the same run may, before it).
HEAVY_MODULES = ("llama_cpp", "torch", "sentence_transformers", "transformers", "skillgraft.engine.llama")
LOADED_AT_START = frozenset(m for m in HEAVY_MODULES if m in sys.modules)


@pytest.fixture(autouse=True)
def _no_model_package():
    """Fail a unit test that imports llama.cpp, torch, sentence-transformers or the real engine."""
    before = {m for m in HEAVY_MODULES if m in sys.modules}
    yield
    loaded = [m for m in HEAVY_MODULES if m in sys.modules and m not in before]
    assert not loaded, f"a unit test imported {loaded}: the fast suite must use skillgraft.testing only"


def _real_model_fixture(name: str):
    @pytest.fixture(name=name)
    def refuse():
        pytest.fail(f"the fast suite uses the fakes only: ask for fake_engine / fake_memory, not {name!r}")

    return refuse


smollm2 = _real_model_fixture("smollm2")
gemma3 = _real_model_fixture("gemma3")
embedder = _real_model_fixture("embedder")
memory = _real_model_fixture("memory")
stocked = _real_model_fixture("stocked")


@pytest.fixture
def fake_engine() -> FakeEngine:
    return FakeEngine()


@pytest.fixture
def fake_embedder() -> FakeEmbedder:
    return FakeEmbedder()


@pytest.fixture
def fake_cli(monkeypatch) -> tuple[FakeEngine, FakeEmbedder]:
    """The memories the CLI opens (``SkillMemory.open``) run on one fake engine and embedder,
    with the namespace and derived-state budget the command gives: ``(engine, embedder)``."""
    engine, embedder = FakeEngine(), FakeEmbedder()
    monkeypatch.setattr(SkillMemory, "open", classmethod(
        lambda cls, home, derived_bytes=None, namespace=None, **options: cls(
            home, engine=engine, embedder=embedder, derived_bytes=derived_bytes, namespace=namespace)))
    return engine, embedder


@pytest.fixture
def fake_memory(tmp_path, fake_engine, fake_embedder):
    """A SkillMemory on a fresh store over the fake engine and embedder."""
    with SkillMemory(tmp_path / "store", engine=fake_engine, embedder=fake_embedder) as mem:
        yield mem


@pytest.fixture
def fake_stocked(fake_memory):
    """Two manuals and one verified solution (checked by the exact verifier: no sandbox)."""
    fake_memory.add_manual(
        "git-squash", GIT_MANUAL, examples=["how do I squash my last commits?", "combine commits into one"]
    )
    fake_memory.add_manual(
        "sourdough", SOURDOUGH_MANUAL, examples=["how do I bake sourdough bread?", "my loaf is too dense"]
    )
    fake_memory.add_solution(QUESTION, ANSWER, method="17 * 23", verifier="exact", expected=ANSWER)
    return fake_memory
