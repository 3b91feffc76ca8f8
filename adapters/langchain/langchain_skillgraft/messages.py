"""LangChain messages as the ``[(role, content), ...]`` chat that skillgraft renders.

Roles become ``system``, ``user``, ``assistant`` or ``tool``: an assistant's tool calls and
a tool's result are written as :mod:`skillgraft.core.tools` renders them for every door.
Only text content is accepted: images, audio, video and files raise :class:`ValueError`.
"""

from __future__ import annotations

from typing import Optional, Sequence

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from skillgraft.adapter import tool_calls_turn, tool_result_turn

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


def to_turn(message: BaseMessage, tool_names: Optional[dict] = None) -> tuple[str, str]:
    """One message as ``(role, content)``; ``tool_names`` maps earlier tool call ids to their
    tools' names (a tool result without a name is named by its call)."""
    text = message_text(message)
    if isinstance(message, SystemMessage):
        return "system", text
    if isinstance(message, HumanMessage):
        return "user", text
    if isinstance(message, AIMessage):
        if not message.tool_calls:
            return "assistant", text
        return "assistant", tool_calls_turn([(call["name"], call["args"]) for call in message.tool_calls], text)
    if isinstance(message, ToolMessage):
        name = message.name or (tool_names or {}).get(message.tool_call_id) or message.tool_call_id
        return "tool", tool_result_turn(name, text)
    if isinstance(message, FunctionMessage):
        return "tool", tool_result_turn(message.name, text)
    if isinstance(message, ChatMessage):
        return _ROLE_NAMES.get(message.role.lower(), "user"), text
    raise ValueError(f"ChatSkillGraft cannot render a message of type {type(message).__name__}")


def to_chat(messages: Sequence[BaseMessage]) -> list[tuple[str, str]]:
    """``messages`` as the chat :meth:`skillgraft.SkillMemory.answer` takes."""
    if not messages:
        raise ValueError("ChatSkillGraft needs at least one message")
    names: dict = {}
    chat = []
    for message in messages:
        chat.append(to_turn(message, names))
        if isinstance(message, AIMessage):
            names.update((call["id"], call["name"]) for call in message.tool_calls if call.get("id"))
    return chat


def user_indices(messages: Sequence[BaseMessage]) -> list[int]:
    """The positions of the human messages in ``messages``."""
    return [
        i for i, message in enumerate(messages)
        if isinstance(message, HumanMessage)
        or (isinstance(message, ChatMessage) and _ROLE_NAMES.get(message.role.lower(), "user") == "user")
    ]


def user_texts(messages: Sequence[BaseMessage]) -> list[str]:
    """The texts of the human messages, in order (media blocks are left out, not refused)."""
    return [str(messages[i].text).strip() for i in user_indices(messages)]
