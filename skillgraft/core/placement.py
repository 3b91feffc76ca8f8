"""Where a chat's skills sit: the one owner of the placement rule every door follows.

The app's own leading system turns and its tools are the prefix a context keeps; skills come
after them, each where it entered the conversation (:attr:`~skillgraft.core.recall.Recall.skills`,
decided by :func:`~skillgraft.core.planning.conversation_recall`), then the rest of the chat
(:func:`~skillgraft.core.chat_layout.placed_prompt` renders it). A block captured ahead is
restored only where it is itself the prefix (:func:`restores_ahead`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

from .chat_layout import chat_tokens, placed_prompt
from .recall import Recall, SkillPlace

if TYPE_CHECKING:
    from .answer import AnswerPlan
    from .blocks import Block

__all__ = ["EXAMPLES_HEADING", "examples_text", "placed_tokens", "restores_ahead", "routed_blocks", "skill_places",
           "without"]

EXAMPLES_HEADING = "Verified examples of these skills in use (each answer was checked for its own question):"


def skill_places(recall: Recall) -> tuple[SkillPlace, ...]:
    """The skills a chat answered on ``recall`` holds: the conversation's (:attr:`Recall.skills`),
    or a grafted block and the set routed with it (:attr:`Recall.members`), after the app's prefix."""
    if recall.skills:
        return recall.skills
    return tuple(SkillPlace(block, 0) for block in recall.members)


def routed_blocks(recall: Recall) -> tuple[Optional["Block"], ...]:
    """The blocks this turn's routing puts in the prompt: the routed set, or the block alone."""
    return recall.members or (recall.block,)


def without(places: Sequence[SkillPlace], *blocks: Optional["Block"]) -> tuple[SkillPlace, ...]:
    """``places`` less ``blocks`` (a routed set that is not in the prompt after all)."""
    gone = {block.id for block in blocks if block is not None}
    return tuple(place for place in places if place.block.id not in gone)


def restores_ahead(block: "Block", places: Sequence[SkillPlace], chat: Sequence[tuple[str, str]], *,
                   reprefill: bool = False) -> bool:
    """Whether ``block``, captured ahead, leads ``chat`` restored: it is the chat's one skill and
    the chat has no system turn of the app's (nor tools) in front of it."""
    return not (block.text_only or reprefill) and len(places) == 1 and not (chat and chat[0][0] == "system")


def examples_text(solutions: Sequence["Block"]) -> str:
    """Verified solutions as worked examples: each question and its checked answer."""
    if not solutions:
        return ""
    shown = "\n\n".join(f"Question: {block.question}\nAnswer: {block.answer}" for block in solutions)
    return f"{EXAMPLES_HEADING}\n\n{shown}"


def placed_tokens(engine, plan: "AnswerPlan", chat: list, places: Sequence[SkillPlace], *,
                  examples: Sequence["Block"] = ()) -> tuple[list[int], int]:
    """``(tokens, mark)`` of ``chat`` (the plan's, with a format's lead) holding ``places``, each
    before the user turn it entered at; ``mark``: the app's turns and the skills in front.
    ``examples`` (:attr:`Recall.examples`) follow the skills in front, outside the mark, in a
    chat of one user turn (a conversation's later turns would part from what its context holds)."""
    if not places:
        return chat_tokens(engine, chat), 0
    shift = len(chat) - len(plan.chat)  # a format's lead may put a system turn in front
    turns = plan.user_turns
    at = [(turns[place.turn] + shift if 0 < place.turn < len(turns) else 0, place.block.source) for place in places]
    return placed_prompt(engine, chat, at, examples_text(examples) if len(turns) == 1 else "")
