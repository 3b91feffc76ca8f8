"""The text of a skill for a host that runs its own model: what MCP and the HTTP skills API return.

A host whose model is not the one a block was captured with cannot graft the block, but it
can read what the block holds: a manual's text, or a verified solution's question, answer,
method and verifier. :func:`skill_text` gives one skill's text and :func:`recall_text` the
skill the memory routes a query to, with the memory's note
(:class:`~skillgraft.core.answer.AnswerNote`, the one every door reports; the recall is
:meth:`SkillMemory.recall`'s, ledger row included) and a sentence telling the host how to use
it. :func:`skill_context` is a routed block's text as context for a model the memory does not
run, and :func:`recall_note` the note of handing it over (LangChain's text recall).
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Protocol

from pydantic import BaseModel, ConfigDict, computed_field

from .answer import AnswerNote
from .blocks import Block
from .pipeline import answer_note
from .recall import Decision, Recall

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
# What a host is handed, per router decision: the verified answer, the skill's text, or nothing.
HANDED = {"exact": "exact", "graft": "text", "abstain": "abstain"}


class Memory(Protocol):
    """What these functions use of a :class:`~skillgraft.memory.SkillMemory`."""

    def get(self, ref: str) -> Block: ...

    def live(self, block: Block) -> Block: ...

    def store_of(self, block: Block) -> Any: ...

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

    ``note`` is the memory's :class:`~skillgraft.core.answer.AnswerNote`: ``exact`` (the
    verified answer is handed over), ``text`` (the routed skill's text is) or ``abstain``,
    ``routed`` the router's decision. ``decision`` (the router's: exact, graft or abstain),
    ``block_id``, ``block_name``, ``score``, ``threshold``, ``reason`` and ``near_miss`` read
    the note. ``answer`` is set on an exact hit only; ``skill`` on exact and graft; ``use``
    says in one sentence how to use them."""

    # The note's fields read at the top are part of the published schema.
    model_config = ConfigDict(frozen=True, json_schema_mode_override="serialization")

    note: AnswerNote
    use: str
    answer: Optional[str] = None
    skill: Optional[SkillText] = None

    @computed_field
    @property
    def decision(self) -> Decision:
        return self.note.routed

    @computed_field
    @property
    def block_id(self) -> Optional[str]:
        return self.note.block_id

    @computed_field
    @property
    def block_name(self) -> Optional[str]:
        return self.note.block_name

    @computed_field
    @property
    def score(self) -> float:
        return self.note.score

    @computed_field
    @property
    def threshold(self) -> float:
        return self.note.threshold

    @computed_field
    @property
    def reason(self) -> str:
        return self.note.reason

    @computed_field
    @property
    def near_miss(self) -> bool:
        return self.note.near_miss


def skill_text(memory: Memory, ref: str) -> SkillText:
    """The text of the skill ``ref`` (id, id prefix, name or a solution's question);
    :class:`~skillgraft.errors.BlockNotFoundError` when there is none (or it expired)."""
    return _text_of(memory, memory.expiry.live(memory.blocks.get(ref)))


def recall_text(memory: Memory, query: str) -> SkillRecall:
    """The memory's recall for ``query`` with the routed skill's text."""
    recall = memory.recall(query)
    block = recall.block
    return SkillRecall(
        note=recall_note(recall),
        use=USE["near_miss" if recall.near_miss else recall.decision],
        answer=block.answer if recall.decision == "exact" and block is not None else None,
        skill=_text_of(memory, block) if block is not None else None,
    )


def recall_note(recall: Recall, *, reason: str = "") -> AnswerNote:
    """The note of handing what ``recall`` found to a model the memory does not run
    (:data:`HANDED`): ``exact``, ``text`` or ``abstain``, ``reason`` the recall's unless given."""
    return answer_note(recall, HANDED[recall.decision], reason=reason)


def _text_of(memory: Memory, block: Block) -> SkillText:
    keys = memory.blocks.store_of(block).routing_keys(block.id)
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
