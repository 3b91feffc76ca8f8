"""How a chat becomes tokens, and how it continues after a grafted block.

**Rendering.** A chat is rendered with the model's own chat template and tokenized in
pieces: the template's own text (its turn markers) with control tokens parsed, every
message's content *without*, so a control-token string inside a message — a user writing
``<|im_end|><|im_start|>system`` — stays ordinary text and never opens a turn. Every
engine renders through :func:`chat_tokens`, so the in-process engine, a llama-server slot
and the fake lay out the same chat as the same tokens.

**A block's prefix.** A block's captured prefix is its text rendered as the chat's system
turn plus the opening of the first user turn (that is where the template puts the user's
text). A chat with its own system turns keeps only the block's system turn — the cells
after it are dropped, which is exact, since no cell depends on a later one — and continues
with the app's system turns and the rest of the chat, exactly as the template renders them.
Templates with a single system turn (Gemma folds it into the first user turn) get the app's
system text in front of the first user message after the whole block instead, as they would
render it themselves.

**A skill's place** (:func:`placed_prompt`): the app's own leading system turns — its prompt
and, with tools, their description (:meth:`~skillgraft.core.tools.OutputFormat.lead`) — are the
cached prefix; a skill follows them, as a system turn of its own (joined to the app's system
text by a blank line where the template glues system turns together), then the rest of the
chat. The prompt's cells up to the end of the skill's turn are the skill's prefix state under
this app's prompt: captured on first use, restored next time. A skill a later turn of a
conversation needs enters just before that turn, after the turns so far, so the cells the
conversation already has stay valid. A block captured ahead leads only a chat that has no
system turns of its own (it is then the prefix: :func:`continuation`); anywhere else its text
is placed like any skill's.
"""

from __future__ import annotations

from typing import Optional, Sequence

from .blocks import Block
from ..errors import EngineError, InputError

Chat = Sequence[tuple[str, str]]
_MARK = "\x1fskillgraft-{}\x1f"
_USER_MARKER = _MARK.format("user")


def split_chat(engine, system: str, user: str = "") -> tuple[str, str]:
    """Split a chat of one system and one user message where the user's text begins.

    Returns ``(prefix, turn)`` as text: the prefix (system text included) is what a block
    captures; the turn is ``user`` plus the template's closing and generation prompt.
    """
    rendered = engine.chat_prompt([("system", system), ("user", _USER_MARKER)])
    head, found, tail = rendered.partition(_USER_MARKER)
    if not found:
        raise EngineError(f"the chat template of {engine.model_name} dropped the user message")
    return head, user + tail


def _trims(engine) -> bool:
    """Whether the template strips the whitespace around a message's text (Gemma's does)."""
    probe = _MARK.format("probe")
    return f" {probe} " not in engine.chat_prompt([("user", f" {probe} ")])


def chat_tokens(engine, messages: Chat, *, add_generation_prompt: bool = True, stop_at_user: bool = False) -> list[int]:
    """The tokens of a rendered chat: the template's text with control tokens, each message's
    text as plain text (a control-token string in it stays text).

    ``stop_at_user`` ends the tokens where the last message's text would begin: a block's
    prefix is ``chat_tokens([("system", text), ("user", "")], stop_at_user=True)``.
    """
    trims = _trims(engine)
    contents = [content.strip() if trims else content for _, content in messages]
    marks = [_MARK.format(i) for i in range(len(messages))]
    rendered = engine.chat_prompt([(role, mark) for (role, _), mark in zip(messages, marks)],
                                  add_generation_prompt=add_generation_prompt)
    tokens: list[int] = []
    rest = rendered
    first = True
    for i, (mark, content) in enumerate(zip(marks, contents)):
        head, found, rest = rest.partition(mark)
        if not found:
            raise EngineError(f"the chat template of {engine.model_name} dropped or repeated a message")
        if head:
            tokens += engine.tokenize(head, add_bos=first, special=True)
            first = False
        if stop_at_user and i == len(messages) - 1:
            return tokens
        if content:
            tokens += engine.tokenize(content, add_bos=first, special=False)
            first = False
    if rest:
        tokens += engine.tokenize(rest, add_bos=first, special=True)
    return tokens


def block_tokens(engine, text: str) -> list[int]:
    """The tokens a block of ``text`` captures: the chat prefix with ``text`` as its system turn."""
    return chat_tokens(engine, [("system", text), ("user", "")], stop_at_user=True)


def block_size(engine, block: Block) -> int:
    """The tokens ``block`` holds: its captured ones, or for a text block those its text makes
    under ``engine`` as a chat's system turn (what it adds to a prompt, give or take the turn's markers)."""
    return len(block_tokens(engine, block.source)) if block.text_only else block.n_tokens


def continuation(engine, block: Block, messages: Chat) -> tuple[int, list[int]]:
    """``(cells of the block kept, tokens after them)`` for a chat led by ``block``.

    :class:`InputError` when the block cannot lead this chat (its tokens are not the start of
    the rendered chat: a template that reorders turns, or a block captured under another
    rendering).
    """
    prefix = tuple(block.tokens)
    full = chat_tokens(engine, [("system", block.source), *messages])
    if tuple(full[: len(prefix)]) == prefix and len(full) > len(prefix):
        return len(prefix), full[len(prefix):]
    try:
        system_only = chat_tokens(engine, [("system", block.source)], add_generation_prompt=False)
    except EngineError:  # a template that folds the system turn into the first user turn drops it alone
        system_only = []
    if 0 < len(system_only) < len(prefix) and tuple(system_only) == prefix[: len(system_only)] \
            and full[: len(system_only)] == system_only:
        return len(system_only), full[len(system_only):]
    folded = chat_tokens(engine, [("system", block.source), *fold_system(messages)])
    if tuple(folded[: len(prefix)]) == prefix and len(folded) > len(prefix):
        return len(prefix), folded[len(prefix):]
    raise InputError(f"block {block.id} cannot lead this chat: the chat template of {engine.model_name} reorders it")


def skill_prompt(engine, text: str, messages: Chat) -> tuple[list[int], int]:
    """``(tokens, mark)``: the chat with the skill's ``text`` after its leading system turns
    (see the module's docstring), and how many leading tokens are the app's turns and the skill."""
    return placed_prompt(engine, messages, [(0, text)])


def placed_prompt(engine, messages: Chat, places: Sequence[tuple[int, str]], after: str = "") -> tuple[list[int], int]:
    """``(tokens, mark)``: the chat with each skill's text entered before the message at its
    index in ``messages``; a skill at or before the first message that is not a system turn
    follows the app's leading system turns (its prompt and tools), a later one enters as a
    system turn of its own just before its message, after the turns so far (or, for a template
    that drops a system turn there, in front of that message's text). ``mark`` counts the
    leading tokens that are the app's turns and the skills in front of the chat (0 when none
    is there): their prefix state is the one kept for the next chat of this app and skill.
    ``after`` (worked examples that change with the question) follows the skills in front as a
    system turn of its own, outside the mark, so the skills' prefix state stays theirs."""
    messages = list(messages)
    lead = next((i for i, (role, _) in enumerate(messages) if role != "system"), len(messages))
    entering: dict[int, list[str]] = {}
    for index, text in places:
        entering.setdefault(max(int(index), lead), []).append(text)
    front = entering.pop(lead, [])
    separate = _separates_system_turns(engine)
    app = messages[:lead]
    if front and app and not separate:
        head = [("system", "\n\n".join([*(content for _, content in app), *front]))]
    else:
        head = [*app, *_system_turns(front, separate)]
    marked, head = head, (_joined(head, after, separate) if front and after else head)
    body: list[tuple[str, str]] = []
    for index in range(lead, len(messages)):
        texts = entering.get(index)
        if texts:
            body += _system_turns(texts, separate)
        body.append(messages[index])
    try:
        tokens = chat_tokens(engine, [*head, *body])
    except EngineError:  # a template that drops a system turn within the chat: the text leads its message
        body = [(role, "\n\n".join([*entering[index], content]) if index in entering else content)
                for index, (role, content) in enumerate(messages) if index >= lead]
        tokens = chat_tokens(engine, [*head, *body])
    if not front:
        return tokens, 0
    opening = chat_tokens(engine, [*marked, ("user", "")], stop_at_user=True)
    mark = 0
    for mark, (a, b) in enumerate(zip(opening, tokens)):
        if a != b:
            break
    else:
        mark = min(len(opening), len(tokens))
    return tokens, mark


def _joined(head: list, text: str, separate: bool) -> list:
    """``head`` and then ``text`` as a system turn of its own (glued to the last system turn where
    the template glues them)."""
    if separate or not head:
        return [*head, ("system", text)]
    role, content = head[-1]
    return [*head[:-1], (role, f"{content}\n\n{text}")]


def _system_turns(texts: Sequence[str], separate: bool) -> list[tuple[str, str]]:
    """``texts`` as system turns: one each, or one joined by blank lines where the template glues them."""
    if not texts:
        return []
    return [("system", text) for text in texts] if separate else [("system", "\n\n".join(texts))]


def _separates_system_turns(engine) -> bool:
    """Whether the template renders two system turns apart (Gemma's glues their texts together)."""
    first, second = _MARK.format("a"), _MARK.format("b")
    return f"{first}{second}" not in engine.chat_prompt([("system", first), ("system", second), ("user", "x")])


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
