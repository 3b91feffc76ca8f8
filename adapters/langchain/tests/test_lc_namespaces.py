"""The LangChain doors on a namespace of the session's store (real model, real router): the
retriever serves the base's candidates when the base wins, and ``block_id`` is the memory's
forced graft (an expired block refused as ``SkillMemory.answer(block=...)`` refuses it)."""

from __future__ import annotations

import pytest

import lc_store
from langchain_skillgraft import ChatSkillGraft, SkillGraftRetriever
from skillgraft import AnswerOptions, SkillMemory
from skillgraft.errors import ExpiredError

GIT_QUESTION = lc_store.GIT_EXAMPLES[0]
BREAD_MANUAL = "Skill manual: baking sourdough bread. Feed the starter, fold, proof overnight and bake covered."
PAST = "2001-01-01T00:00:00Z"


@pytest.fixture(scope="module")
def team(home, memory):
    """Namespace lc-team of the session's store, on the session memory's engine and embedder,
    holding one manual of its own that has expired."""
    with SkillMemory(home, model=memory.model, engine=memory.engine, embedder=memory.router.embedder,
                     namespace="lc-team") as team:
        team.add_manual("sourdough", BREAD_MANUAL, examples=["how long should sourdough bread proof?"], expires=PAST)
        yield team


def test_the_retriever_on_a_namespace_serves_the_bases_blocks(team, memory):
    assert team.blocks.store_of(team.route(GIT_QUESTION).block) is team.base  # the base wins the route
    documents = SkillGraftRetriever(memory=team, k=3).invoke(GIT_QUESTION)
    assert [d.metadata["name"] for d in documents][0] == "git-squash"
    assert {d.metadata["name"] for d in documents} == {"git-squash", "git-amend", "git-undo"}
    assert documents == SkillGraftRetriever(memory=memory, k=3).invoke(GIT_QUESTION)


def test_block_id_on_a_namespace_is_the_memorys_forced_graft(team):
    answer = ChatSkillGraft(memory=team, max_tokens=8, block_id="git-squash").invoke(GIT_QUESTION)
    core = team.answer([("user", GIT_QUESTION)], AnswerOptions(max_tokens=8), block="git-squash")
    meta = answer.response_metadata["skillgraft"]
    assert meta["routed"] == "graft" and meta["block_name"] == "git-squash" and meta["decision"] == core.note.decision
    assert answer.content == core.text
    with pytest.raises(ExpiredError, match="sourdough"):
        team.answer([("user", GIT_QUESTION)], AnswerOptions(max_tokens=8), block="sourdough")
    with pytest.raises(ExpiredError, match="sourdough"):
        ChatSkillGraft(memory=team, max_tokens=8).invoke(GIT_QUESTION, block_id="sourdough")
