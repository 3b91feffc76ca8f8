"""SkillGraftRetriever: the blocks a skillgraft memory could graft for a query, as Documents."""

from __future__ import annotations

import os
from typing import Any, Optional

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables.config import run_in_executor
from pydantic import ConfigDict, Field, field_validator
from skillgraft.adapter import Block, Recall, SkillMemory

from .shared import memory_lock, open_memory


class SkillGraftRetriever(BaseRetriever):
    """Routes a query with :meth:`skillgraft.SkillMemory.route`.

    Gives up to ``k`` Documents, best first: the block the memory would graft, then the
    router's other candidates whose score also reaches the abstain threshold (the router
    keeps its few best candidates, so a large ``k`` gives at most that many). Each holds the
    block's source text, with ``block_id``, ``name``, ``kind``, ``score``, ``threshold``,
    ``rank`` and ``decision`` (``graft`` for the first, ``candidate`` after it) in its
    metadata, and ``near_miss`` and ``reason`` on the first. ``abstain`` (nothing close
    enough) gives no Documents. ``k`` may also be given per call: ``invoke(query, k=3)``.
    Give a ``memory``, or a store folder ``home`` (default ``$SKILLGRAFT_HOME``).
    """

    memory: Optional[SkillMemory] = Field(default=None, exclude=True, repr=False)
    home: Optional[str] = None
    model: Optional[str] = None
    """Names the shared memory to reuse (routing itself does not load the model)."""
    k: int = Field(default=1, ge=1)
    """Documents to return at most."""

    model_config = ConfigDict(arbitrary_types_allowed=True, protected_namespaces=())

    @field_validator("home", "model", mode="before")
    @classmethod
    def _path_as_text(cls, value: Any) -> Any:
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    @property
    def skill_memory(self) -> SkillMemory:
        return self.memory if self.memory is not None else open_memory(self.home, self.model)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        k = _count(kwargs.pop("k", self.k))
        if kwargs:
            raise TypeError(f"SkillGraftRetriever takes only k as a search argument, got {sorted(kwargs)}")
        memory = self.skill_memory
        with memory_lock(memory):
            recall = memory.route(query)
            if recall.decision != "graft" or recall.block is None:
                return []
            ranked = [(recall.block, recall.score)]
            ranked += [
                (memory.blocks.get(block_id), float(score))  # a namespace's own block, or its base's
                for block_id, score in recall.candidates
                if block_id != recall.block.id and score >= recall.threshold
            ]
        return [_document(block, score, rank, recall) for rank, (block, score) in enumerate(ranked[:k])]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        return await run_in_executor(
            None, self._get_relevant_documents, query, run_manager=run_manager.get_sync(), **kwargs
        )


def _count(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a whole number of Documents, at least 1; got {k!r}")
    return k


def _document(block: Block, score: float, rank: int, recall: Recall) -> Document:
    metadata = {
        "block_id": block.id,
        "name": block.name,
        "kind": block.kind,
        "score": score,
        "threshold": recall.threshold,
        "rank": rank,
        "decision": "graft" if rank == 0 else "candidate",
    }
    if rank == 0:
        metadata.update(near_miss=recall.near_miss, reason=recall.reason)
    return Document(page_content=block.source, metadata=metadata, id=block.id)
