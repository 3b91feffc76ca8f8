"""A memory as the answer pipeline's planning sees it: the :class:`~skillgraft.core.planning.PlanMemory`
a :class:`~skillgraft.memory.SkillMemory` hands :func:`~skillgraft.core.planning.plan_answer`."""

from __future__ import annotations

from ..core.blocks import Block
from ..core.recall import Recall


class PlanningView:
    """A memory as the answer pipeline's planning sees it (a :class:`~skillgraft.core.planning.PlanMemory`)."""

    def __init__(self, memory) -> None:  # a SkillMemory
        self.memory = memory
        self.reprefill_foreign = memory.reprefill_foreign
        self.conversation_policy = memory.conversations

    @property
    def threshold(self) -> float:
        return self.memory.router.threshold

    @property
    def gate_threshold(self) -> float:
        return self.memory.confidence_gate.threshold

    @property
    def runtime(self):
        return self.memory.engine.fingerprint

    def recall(self, query: str, *, log: bool = True) -> Recall:
        return self.memory.recall(query, log=log)

    def check_grammar(self, grammar: str) -> None:
        self.memory.engine.check_grammar(grammar)

    def state_of(self, block: Block):
        return self.memory.blocks.store_of(block).state_of(block)
