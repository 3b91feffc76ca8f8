"""How a chat continues after a grafted block: which of its cells stay, and the text after them.

A block's captured prefix is its text rendered as the chat's system turn plus the opening of
the first user turn (that is where the template puts the user's text). A chat with its own
system turns keeps only the block's system turn — the cells after it are dropped, which is
exact, since no cell depends on a later one — and continues with the app's system turns and
the rest of the chat, exactly as the template renders them. Templates with a single system
turn (Gemma folds it into the first user turn) get the app's system text in front of the
first user message after the whole block instead, as they would render it themselves.
"""

from __future__ import annotations

from typing import Optional, Sequence

from .blocks import Block
from ..errors import EngineError, InputError

Chat = Sequence[tuple[str, str]]
_USER_MARKER = "\x1fskillgraft-user\x1f"


def split_chat(engine, system: str, user: str = "") -> tuple[str, str]:
    """Split a chat of one system and one user message where the user's text begins.

    Returns ``(prefix, turn)``: the prefix (system text included) is what a block captures;
    the turn is ``user`` plus the template's closing and generation prompt. Every engine's
    ``chat_split`` is this over its own ``chat_prompt``.
    """
    rendered = engine.chat_prompt([("system", system), ("user", _USER_MARKER)])
    head, found, tail = rendered.partition(_USER_MARKER)
    if not found:
        raise EngineError(f"the chat template of {engine.model_name} dropped the user message")
    return head, user + tail


def block_tokens(engine, text: str) -> list[int]:
    """The tokens a block of ``text`` captures: the chat prefix with ``text`` as its system turn."""
    prefix, _ = engine.chat_split(text)
    return engine.tokenize(prefix)


def continuation(engine, block: Block, messages: Chat) -> tuple[int, str]:
    """``(cells of the block kept, text after them)`` for a chat led by ``block``."""
    prefix, _ = engine.chat_split(block.source)
    rendered = engine.chat_prompt([("system", block.source), *messages])
    if rendered.startswith(prefix) and len(rendered) > len(prefix):
        return block.n_tokens, rendered[len(prefix):]
    system_only = engine.chat_prompt([("system", block.source)], add_generation_prompt=False)
    if system_only and prefix.startswith(system_only) and rendered.startswith(system_only):
        keep = engine.tokenize(system_only)
        if 0 < len(keep) < block.n_tokens and tuple(keep) == block.tokens[: len(keep)]:
            return len(keep), rendered[len(system_only):]
    rendered = engine.chat_prompt([("system", block.source), *fold_system(messages)])
    if rendered.startswith(prefix) and len(rendered) > len(prefix):
        return block.n_tokens, rendered[len(prefix):]
    raise InputError(f"block {block.id} cannot lead this chat: the chat template of {engine.model_name} reorders it")


def with_system(system: Optional[str], messages: list) -> list:
    if system is None:
        return messages
    if not isinstance(system, str) or not system.strip() or "\x00" in system:
        raise InputError("the system prompt must be non-empty text without NUL bytes")
    return [("system", system), *messages]


def fold_system(messages: Sequence[tuple[str, str]]) -> list:
    """The chat with its system turns folded into the front of the first user message."""
    system = [content for role, content in messages if role == "system"]
    rest = [(role, content) for role, content in messages if role != "system"]
    if not system:
        return rest
    joined = "\n\n".join(system)
    for i, (role, content) in enumerate(rest):
        if role == "user":
            rest[i] = ("user", f"{joined}\n\n{content}")
            return rest
    return [("user", joined), *rest]
