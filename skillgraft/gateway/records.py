"""The values the gateway's service passes around: options, the plan of a chat, the
``skillgraft`` note of a response, answers and stream ends; and the chat's own checks."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional, Sequence

from ..errors import InputError
from ..routing.router import Recall, clean_query, require_text
from ..core.states import KVState

ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class GenerationOptions:
    max_tokens: int = 256
    temperature: float = 0.0
    seed: int = 0
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class MemoryNote:
    """The ``skillgraft`` object of a response: what the memory decided and what it saved."""

    decision: str
    block_id: Optional[str]
    block_name: Optional[str]
    score: float
    threshold: float
    cache_n: int
    reason: str
    gate: Optional[dict] = None

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ChatAnswer:
    text: str
    finish_reason: str
    note: MemoryNote
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class StreamEnd:
    """The last event of a stream."""

    finish_reason: str
    completion_tokens: int
    prompt_tokens: int = 0


@dataclass(frozen=True)
class AnswerPlan:
    """A recall and, for a graft, the verified state it restores."""

    query: str
    recall: Recall
    state: Optional[KVState]
    gate_threshold: float


@dataclass(frozen=True)
class PreparedChat:
    """A checked chat and the memory's plan for it (:meth:`Gateway.prepare`)."""

    chat: list
    plan: AnswerPlan
    started: float

    @property
    def needs_model(self) -> bool:
        """False for an exact answer: no server slot is needed."""
        return self.plan.recall.decision != "exact"


def chat_messages(messages: Sequence[tuple[str, str]]) -> tuple[list[tuple[str, str]], str]:
    """The chat as ``[(role, content)]`` and its last user message; :class:`InputError` otherwise."""
    if not messages:
        raise InputError("messages is empty")
    chat = []
    for role, content in messages:
        if role not in ROLES:
            raise InputError(f"unsupported message role {role!r}; use one of {', '.join(ROLES)}")
        chat.append((role, require_text(content, f"a {role} message")))
    users = [content for role, content in chat if role == "user"]
    if not users or chat[-1][0] != "user":
        raise InputError("the last message must be the user's")
    return chat, clean_query(users[-1])
