"""Recall: what the memory suggests for a query (exact, graft or abstain), and why."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Optional

if TYPE_CHECKING:
    from .blocks import Block

Decision = Literal["exact", "graft", "abstain"]


@dataclass(frozen=True)
class SkillPlace:
    """A skill in a chat: its block, and the user turn it entered before (``turn`` 0: the chat's
    first user message; the skill then follows the app's own system turns and tools)."""

    block: "Block"
    turn: int = 0

    def as_dict(self) -> dict:
        return {"block_id": self.block.id, "block_name": self.block.name, "turn": self.turn}


@dataclass(frozen=True)
class Recall:
    """What the memory suggests for a query, and why.

    Its attributes read by the names its JSON (:meth:`as_dict`, the CLI's ``--json``) and the
    HTTP note (:class:`~skillgraft.core.answer.AnswerNote`) give them: ``block_id`` and
    ``block_name`` the block's, ``routed`` the router's decision (the note's name for
    ``decision``; the note's own ``decision`` is the answer's)."""

    decision: Decision
    block: Optional["Block"]
    score: float
    threshold: float
    reason: str
    runner_up: Optional[str] = None
    candidates: list = field(default_factory=list, repr=False)
    near_miss: bool = False
    # "entered" (the block entered at this turn, after the turns so far), "kept" (the conversation
    # holds it already), "switched" (policy switch: it replaced the conversation's block) or ""
    conversation: str = ""
    # every skill the chat holds, in the order they entered (:mod:`skillgraft.core.planning`);
    # empty for a recall of one question alone (its block, if grafted, follows the app's prefix)
    skills: tuple[SkillPlace, ...] = ()
    # the blocks routed with ``block`` (:mod:`skillgraft.routing.skill_sets`), each on its own evidence
    companions: tuple["Block", ...] = ()
    # verified solutions of questions near this one that used the routed set's skills, nearest
    # first (:mod:`skillgraft.routing.experience`): placed beside them as worked examples
    examples: tuple["Block", ...] = ()

    @property
    def members(self) -> tuple["Block", ...]:
        """The routed set this question's turn enters with, in its canonical order (by block
        id: the same set always gives the same tokens); empty unless grafted."""
        if self.decision != "graft" or self.block is None:
            return ()
        return tuple(sorted((self.block, *self.companions), key=lambda block: block.id))

    @property
    def block_id(self) -> Optional[str]:
        return self.block.id if self.block else None

    @property
    def block_name(self) -> Optional[str]:
        return self.block.name if self.block else None

    @property
    def routed(self) -> Decision:
        """The router's decision: :attr:`decision`, by the name the answer's note gives it."""
        return self.decision

    def as_dict(self) -> dict:
        return {
            "decision": self.decision,
            "block_id": self.block_id,
            "block_name": self.block_name,
            "score": round(self.score, 6),
            "threshold": self.threshold,
            "reason": self.reason,
            "near_miss": self.near_miss,
            "conversation": self.conversation,
            "runner_up": self.runner_up,
            "skills": [place.as_dict() for place in self.skills],
            "companions": [{"block_id": b.id, "block_name": b.name} for b in self.companions],
            **({"examples": [{"block_id": b.id, "question": b.question} for b in self.examples]} if self.examples else {}),
            "candidates": [{"block_id": b, "score": round(float(sc), 6)} for b, sc in self.candidates],
        }
