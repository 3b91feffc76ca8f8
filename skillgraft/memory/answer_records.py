"""``memory.ledger``: the ledger rows of a memory's recalls and answers, one owner for every
door (the gateway records its answers here too)."""

from __future__ import annotations

from typing import Optional

from ..core.answer import AnswerNote, AnswerPlan
from ..core.questions import question_sha256
from ..core.recall import Recall
from ..core.timings import Timings
from ..store.ledger import LedgerEvent

__all__ = ["Ledger"]


class Ledger:
    """``memory.ledger``: writes a row for each recall and answer to the memory's own store."""

    def __init__(self, memory) -> None:
        self.memory = memory

    def answered(self, plan: AnswerPlan, note: AnswerNote, end) -> None:
        """The ledger row of one answer (every door's answers are recorded here)."""
        self.memory.store.log(LedgerEvent(
            "generate", decision=note.decision, block_id=note.block_id, query_sha256=question_sha256(plan.query),
            score=note.score, threshold=note.threshold, decoded_tokens=end.completion_tokens,
            prefill_tokens_avoided=note.prefill_tokens_avoided, timings=end.timings.as_dict(),
            detail={"routed": note.routed, "gate": note.gate.as_dict() if note.gate else None, "reason": note.reason,
                    "cache_n": note.cache_n, "reused_from": note.reused_from},
        ))

    def recalled(self, event: str, query: str, recall: Recall, timings: Optional[Timings] = None) -> None:
        """The ledger row of one recall (``event``: ``recall``, or what else judged the query)."""
        self.memory.store.log(LedgerEvent(
            event, decision=recall.decision, block_id=recall.block_id, query_sha256=question_sha256(query),
            score=recall.score, threshold=recall.threshold, timings=timings.as_dict() if timings else {},
        ))
