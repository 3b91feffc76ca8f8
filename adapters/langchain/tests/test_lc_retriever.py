"""SkillGraftRetriever on the real router: up to k Documents when it grafts, none when it abstains."""

from __future__ import annotations

import pytest

import lc_store
from langchain_skillgraft import SkillGraftRetriever

GIT_QUESTION = lc_store.GIT_EXAMPLES[0]


@pytest.fixture(scope="module")
def retriever(memory):
    return SkillGraftRetriever(memory=memory)


def test_graft_gives_the_block_source(retriever, manual):
    (document,) = retriever.invoke(lc_store.GRAFT_QUESTION)
    assert document.page_content == manual.source and document.id == manual.id
    meta = document.metadata
    assert meta["block_id"] == manual.id and meta["name"] == "git-squash" and meta["kind"] == "manual"
    assert meta["decision"] == "graft" and meta["score"] >= meta["threshold"] and meta["rank"] == 0
    assert meta["near_miss"] is False and "git-squash" in meta["reason"]


def test_k_gives_the_candidates_that_pass_the_threshold_best_first(memory):
    documents = SkillGraftRetriever(memory=memory, k=3).invoke(GIT_QUESTION)
    assert [d.metadata["name"] for d in documents][0] == "git-squash"
    assert {d.metadata["name"] for d in documents} == {"git-squash", "git-amend", "git-undo"}
    scores = [d.metadata["score"] for d in documents]
    assert scores == sorted(scores, reverse=True) and min(scores) >= documents[0].metadata["threshold"]
    assert [d.metadata["decision"] for d in documents] == ["graft", "candidate", "candidate"]
    assert [d.metadata["rank"] for d in documents] == [0, 1, 2]
    assert documents[1].page_content == memory.store.get(documents[1].id).source
    # The verified solution is a candidate too, far below the threshold: never a Document.
    assert len(SkillGraftRetriever(memory=memory, k=10).invoke(GIT_QUESTION)) == 3


async def test_k_per_call_overrides_the_field(retriever):
    assert len(retriever.invoke(GIT_QUESTION, k=2)) == 2
    assert len(await retriever.ainvoke(GIT_QUESTION, k=3)) == 3
    assert len(retriever.invoke(GIT_QUESTION)) == 1


def test_bad_search_arguments_are_refused(retriever, memory):
    with pytest.raises(TypeError, match=r"only k .*\['top_k'\]"):
        retriever.invoke(GIT_QUESTION, top_k=2)
    for bad in (0, -1, 2.5, "3", True):
        with pytest.raises(ValueError, match="k must be a whole number"):
            retriever.invoke(GIT_QUESTION, k=bad)
    with pytest.raises(ValueError):
        SkillGraftRetriever(memory=memory, k=0)


async def test_abstain_gives_nothing(retriever):
    assert retriever.invoke(lc_store.ABSTAIN_QUESTION) == []
    assert await retriever.ainvoke(lc_store.ABSTAIN_QUESTION, k=3) == []


def test_by_folder_shares_the_memory(home, memory):
    assert SkillGraftRetriever(home=home).skill_memory is memory
