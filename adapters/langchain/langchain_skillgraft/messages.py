"""LangChain messages as the ``[(role, content), ...]`` chat that skillgraft renders.

Roles become ``system``, ``user`` or ``assistant``. The model has no tool calling, so a
tool result is rendered as user text and an assistant's tool calls as assistant text.
Only text content is accepted: images, audio, video and files raise :class:`ValueError`.
"""

from __future__ import annotations

import json
from typing import Sequence

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

MEDIA_BLOCKS = frozenset({"audio", "file", "image", "image_url", "input_audio", "media", "video"})
_ROLE_NAMES = {
    "ai": "assistant",
    "assistant": "assistant",
    "developer": "system",
    "human": "user",
    "system": "system",
    "user": "user",
}


def message_text(message: BaseMessage) -> str:
    """The text of ``message``; raises :class:`ValueError` on media content."""
    if isinstance(message.content, list):
        for block in message.content:
            kind = block.get("type") if isinstance(block, dict) else None
            if kind in MEDIA_BLOCKS:
                raise ValueError(
                    f"ChatSkillGraft takes text only: a {type(message).__name__} carries a {kind!r} content block"
                )
    return str(message.text)


def _tool_calls_text(message: AIMessage) -> str:
    calls = [f"Called tool {c['name']} with {json.dumps(c['args'], sort_keys=True)}." for c in message.tool_calls]
    return "\n".join(calls)


def to_turn(message: BaseMessage) -> tuple[str, str]:
    """One message as ``(role, content)``."""
    text = message_text(message)
    if isinstance(message, SystemMessage):
        return "system", text
    if isinstance(message, HumanMessage):
        return "user", text
    if isinstance(message, AIMessage):
        calls = _tool_calls_text(message) if message.tool_calls else ""
        return "assistant", "\n".join(part for part in (text, calls) if part)
    if isinstance(message, ToolMessage):
        source = message.name or message.tool_call_id
        return "user", f"Tool {source} returned: {text}"
    if isinstance(message, FunctionMessage):
        return "user", f"Function {message.name} returned: {text}"
    if isinstance(message, ChatMessage):
        return _ROLE_NAMES.get(message.role.lower(), "user"), text
    raise ValueError(f"ChatSkillGraft cannot render a message of type {type(message).__name__}")


def to_chat(messages: Sequence[BaseMessage]) -> list[tuple[str, str]]:
    """``messages`` as the chat :meth:`skillgraft.SkillMemory.chat` takes."""
    if not messages:
        raise ValueError("ChatSkillGraft needs at least one message")
    return [to_turn(m) for m in messages]


def last_user_text(messages: Sequence[BaseMessage]) -> str:
    """The text of the latest human message, or ``""`` when there is none."""
    for message in reversed(messages):
        if isinstance(message, HumanMessage) or (
            isinstance(message, ChatMessage) and _ROLE_NAMES.get(message.role.lower(), "user") == "user"
        ):
            return str(message.text).strip()  # media blocks are left out, not refused
    return ""
