"""SkillGraftRetriever: the block a skillgraft memory would graft for a query, as a Document."""

from __future__ import annotations

import os
from typing import Any, Optional

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, field_validator
from skillgraft import SkillMemory

from .shared import memory_lock, open_memory


class SkillGraftRetriever(BaseRetriever):
    """Routes a query with :meth:`skillgraft.SkillMemory.route`.

    ``graft`` gives one Document holding the block's source text, with ``block_id``,
    ``name``, ``kind``, ``score``, ``threshold`` and ``decision`` in its metadata;
    ``abstain`` (nothing close enough) gives no Documents. Give a ``memory``, or a
    store folder ``home`` (default ``$SKILLGRAFT_HOME``).
    """

    memory: Optional[SkillMemory] = Field(default=None, exclude=True, repr=False)
    home: Optional[str] = None
    model: Optional[str] = None
    """Names the shared memory to reuse (routing itself does not load the model)."""

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
        if kwargs:
            raise TypeError(f"SkillGraftRetriever takes no search arguments, got {sorted(kwargs)}")
        memory = self.skill_memory
        with memory_lock(memory):
            recall = memory.route(query)
        if recall.decision != "graft" or recall.block is None:
            return []
        block = recall.block
        metadata = {
            "block_id": block.id,
            "name": block.name,
            "kind": block.kind,
            "score": recall.score,
            "threshold": recall.threshold,
            "decision": recall.decision,
        }
        return [Document(page_content=block.source, metadata=metadata, id=block.id)]
