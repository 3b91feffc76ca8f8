"""The text of a skill for a host that runs its own model: what MCP and the HTTP skills API return.

A host whose model is not the one a block was captured with cannot graft the block, but it
can read what the block holds: a manual's text, or a verified solution's question, answer,
method and verifier. :func:`skill_text` gives one skill's text and :func:`recall_text` the
skill the memory routes a query to, with the memory's decision, score and reasons (the
recall is :meth:`SkillMemory.recall`'s, ledger row included), and a sentence telling the
host how to use it. :func:`skill_context` is a routed block's text as context for a model the
memory does not run (LangChain's text recall).
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Protocol

from pydantic import BaseModel, ConfigDict

from .blocks import Block
from .recall import Recall

# How a host should use what a recall returns, per decision (a near miss has its own).
USE = {
    "exact": "the verified answer to this very question: reply with `answer` as it is",
    "graft": "a skill relevant to the question: give `skill.text` to the model as context before the question",
    "near_miss": (
        "the verified solution of another question: a worked example for the model's context only; "
        "its answer is not this question's answer"
    ),
    "abstain": "nothing in memory is close enough: answer without it",
}


class Memory(Protocol):
    """What these functions use of a :class:`~skillgraft.memory.SkillMemory`."""

    store: Any

    def get(self, ref: str) -> Block: ...

    def recall(self, query: str) -> Recall: ...


class SkillText(BaseModel):
    """One skill as a host reads it. ``text`` is what the block captured: a manual's text, or
    a solution's question, answer and method as one text; a solution also has them apart."""

    model_config = ConfigDict(frozen=True)

    id: str
    name: str
    kind: Literal["manual", "solution"]
    description: str
    text: str
    examples: list[str]
    n_tokens: int
    question: Optional[str] = None
    answer: Optional[str] = None
    method: Optional[str] = None
    verifier: Optional[str] = None


class SkillRecall(BaseModel):
    """What the memory would do for a query, with the routed skill's text for a host's own model.

    ``answer`` is set on an exact hit only; ``skill`` on exact and graft; ``use`` says in one
    sentence how to use them."""

    model_config = ConfigDict(frozen=True)

    decision: Literal["exact", "graft", "abstain"]
    block_id: Optional[str]
    block_name: Optional[str]
    score: float
    threshold: float
    reason: str
    near_miss: bool
    use: str
    answer: Optional[str] = None
    skill: Optional[SkillText] = None


def skill_text(memory: Memory, ref: str) -> SkillText:
    """The text of the skill ``ref`` (id, id prefix, name or a solution's question);
    :class:`~skillgraft.errors.BlockNotFoundError` when there is none."""
    return _text_of(memory, memory.get(ref))


def recall_text(memory: Memory, query: str) -> SkillRecall:
    """The memory's recall for ``query`` with the routed skill's text."""
    recall = memory.recall(query)
    block = recall.block
    skill = _text_of(memory, block) if block is not None else None
    return SkillRecall(
        decision=recall.decision,
        block_id=skill.id if skill else None,
        block_name=skill.name if skill else None,
        score=round(float(recall.score), 6),
        threshold=float(recall.threshold),
        reason=recall.reason,
        near_miss=recall.near_miss,
        use=USE["near_miss" if recall.near_miss else recall.decision],
        answer=block.answer if recall.decision == "exact" and block is not None else None,
        skill=skill,
    )


def _text_of(memory: Memory, block: Block) -> SkillText:
    keys = memory.store.routing_keys(block.id)
    examples = [key["text"] for key in keys if key["kind"] == "example" and key["text"] != block.question]
    return SkillText(
        id=block.id, name=block.name, kind=block.kind, description=block.description, text=block.source,
        examples=examples, n_tokens=block.n_tokens, question=block.question, answer=block.answer,
        method=block.method, verifier=block.verifier,
    )


def skill_context(block: Block, *, near_miss: bool = False) -> str:
    """``block``'s text (a manual, or a solution's question, answer and method) as context for
    another model, saying what it is; a near miss is marked as a worked example whose answer
    is not to be reused (:data:`USE`)."""
    if block.kind == "manual":
        what = f"a skill manual ({block.name})"
    elif near_miss:
        what = f"{USE['near_miss']} ({block.name})"
    else:
        what = f"a verified solution ({block.name})"
    return f"From memory, {what}:\n{block.source}"
