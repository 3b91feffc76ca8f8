"""SkillGraftRetriever on the real router: one Document when it grafts, none when it abstains."""

from __future__ import annotations

import pytest

import lc_store
from langchain_skillgraft import SkillGraftRetriever


@pytest.fixture(scope="module")
def retriever(memory):
    return SkillGraftRetriever(memory=memory)


def test_graft_gives_the_block_source(retriever, manual):
    (document,) = retriever.invoke(lc_store.GRAFT_QUESTION)
    assert document.page_content == manual.source and document.id == manual.id
    meta = document.metadata
    assert meta["block_id"] == manual.id and meta["name"] == "git-squash" and meta["kind"] == "manual"
    assert meta["decision"] == "graft" and meta["score"] >= meta["threshold"]


async def test_abstain_gives_nothing(retriever):
    assert retriever.invoke(lc_store.ABSTAIN_QUESTION) == []
    assert await retriever.ainvoke(lc_store.ABSTAIN_QUESTION) == []


def test_by_folder_shares_the_memory(home, memory):
    assert SkillGraftRetriever(home=home).skill_memory is memory
