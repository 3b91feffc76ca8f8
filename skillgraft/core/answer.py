"""The values of one answer: its options, the plan behind it, the note every door reports,
and how it ended. The steps that make an answer are :mod:`skillgraft.core.pipeline`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal, Optional, Sequence

from ..errors import InputError
from .gate import GateVerdict
from .recall import Recall
from .sampling import SamplingOptions
from .states import KVState, TokenStep
from .text_checks import clean_query, require_text
from .timings import Timings
from .tools import OutputFormat, ToolCall

AnswerDecision = Literal["exact", "graft", "abstain", "fallback", "text", "delegated"]
# A ``tool`` turn is a tool's result (see :func:`~skillgraft.core.tools.tool_result_turn`):
# rendered as the user's, never the query.
ROLES = ("system", "user", "assistant", "tool")
DEFAULT_MAX_TOKENS = 256


@dataclass(frozen=True)
class AnswerOptions:
    """How to answer: the one owner of the sampling defaults every door uses.

    ``temperature`` 0 is greedy (the same text through every door); ``stop`` strings end
    the answer (the text from the first one on is dropped); ``repeat_penalty`` 1 (off) by
    default, as llama-server's penalty also counts prompt tokens and the engines would
    disagree; ``voice`` lets the model voice a verified answer in a few tokens (in-process);
    ``format`` holds the answer to tool calls or JSON (:mod:`skillgraft.core.tools`).
    """

    max_tokens: int = DEFAULT_MAX_TOKENS
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    stop: tuple[str, ...] = ()
    repeat_penalty: float = 1.0
    voice: bool = False
    format: Optional[OutputFormat] = None

    def __post_init__(self) -> None:
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise InputError(f"max_tokens must be an int >= 1, got {self.max_tokens!r}")
        if not 0.0 <= float(self.temperature) <= 2.0:
            raise InputError(f"temperature must be in [0, 2], got {self.temperature!r}")
        if not 0.0 < float(self.top_p) <= 1.0:
            raise InputError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**31:
            raise InputError(f"seed must be an int in [0, 2**31), got {self.seed!r}")
        if not 0.0 < float(self.repeat_penalty) <= 4.0:
            raise InputError(f"repeat_penalty must be in (0, 4], got {self.repeat_penalty!r}")

    def sampling(self, room: int) -> SamplingOptions:
        """The sampler's options for an answer with ``room`` tokens of context left."""
        return SamplingOptions(
            max(1, min(self.max_tokens, room)), float(self.temperature), float(self.top_p), self.seed,
            float(self.repeat_penalty), grammar=self.format.grammar if self.format else None,
        )


def check_chat(messages: Sequence[tuple[str, str]]) -> tuple[tuple[tuple[str, str], ...], str]:
    """The chat as ``((role, content), ...)`` and its last user message (the query), or
    :class:`InputError`: every door checks a chat with this.

    The chat ends with the user's message or a tool's result; tool results are rendered as
    user turns (consecutive ones as one) and are never the query.
    """
    if not messages:
        raise InputError("the chat has no messages")
    chat: list[tuple[str, str]] = []
    for message in messages:
        if not isinstance(message, (tuple, list)) or len(message) != 2:
            raise InputError(f"a message must be a (role, content) pair, got {type(message).__name__}")
        role, content = message
        if role not in ROLES:
            raise InputError(f"unsupported message role {role!r}; use one of {', '.join(ROLES)}")
        chat.append((role, require_text(content, f"a {role} message")))
    if chat[-1][0] not in ("user", "tool"):
        raise InputError("the last message must be the user's (or a tool's result)")
    query = next((content for role, content in reversed(chat) if role == "user"), None)
    if query is None:
        raise InputError("the chat has no user message")
    return rendered(chat), clean_query(query)


def user_turn_indices(chat: Sequence[tuple[str, str]]) -> tuple[int, ...]:
    """Where each user message of ``chat`` is in its :func:`rendered` form (tool results are
    user turns there too, consecutive ones merged)."""
    indices, at = [], -1
    for index, (role, _) in enumerate(chat):
        if not (role == "tool" and index and chat[index - 1][0] == "tool"):
            at += 1
        if role == "user":
            indices.append(at)
    return tuple(indices)


def rendered(chat: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """The chat as templates take it: tool results as user turns, consecutive ones as one."""
    turns: list[tuple[str, str]] = []
    for index, (role, content) in enumerate(chat):
        if role == "tool" and index and chat[index - 1][0] == "tool":
            turns[-1] = ("user", f"{turns[-1][1]}\n{content}")
        else:
            turns.append(("user" if role == "tool" else role, content))
    return tuple(turns)


@dataclass(frozen=True)
class AnswerPlan:
    """A checked chat, what the memory recalled for its last user message and, for a graft,
    the verified state to restore (``reprefill``: a foreign block's text is prefilled
    instead). ``unusable`` says why a routed block cannot be grafted (it is then answered
    plainly, reported as a fallback). ``user_turns`` are the chat's user messages' indices in
    ``chat`` (where a skill a later turn needs enters)."""

    chat: tuple[tuple[str, str], ...]
    query: str
    recall: Recall
    gate_threshold: float
    state: Optional[KVState] = None
    reprefill: bool = False
    unusable: str = ""
    timings: Timings = field(default_factory=Timings)
    user_turns: tuple[int, ...] = ()

    @property
    def needs_model(self) -> bool:
        """False for an exact answer that is not voiced: no context is needed."""
        return self.recall.decision != "exact"


@dataclass(frozen=True)
class AnswerNote:
    """What the memory did for one answer — the ``skillgraft`` metadata every door reports.

    ``decision``: ``exact`` (the verified answer), ``graft`` (the block's state restored and
    the answer stood), ``fallback`` (a block was routed to but its graft did not stand — a
    near miss, a refused gate, or a block that cannot lead this chat — and the answer was
    generated plainly), or ``abstain`` (routing found nothing close enough). A door that
    hands a routed skill to a model skillgraft does not run reports ``text`` (the skill's
    text given to it as context) or ``delegated`` (passed on to a model that recalls from
    this memory itself: the LangChain middleware with another chat model). ``routed`` is
    the router's own decision; ``block_id`` / ``block_name`` the block used or tried;
    ``cache_n`` the prompt cells the context reused instead of evaluating them and
    ``reused_from`` where they came from (``block``: the block's state; ``derived``: a derived
    prefix state; ``slot``: what the context held from its last answer; ``""``: nothing);
    ``prefill_tokens_avoided`` counts them too (the block's and the app's prefix alike);
    ``gate`` the confidence verdict
    (:class:`~skillgraft.core.gate.GateVerdict`, None where no graft was judged);
    ``conversation`` is ``entered`` when the turn's block entered the conversation at this
    turn, after the turns so far, ``kept`` when the conversation held it already, ``switched``
    (policy ``switch``) when it replaced the conversation's block in front of the chat, ``""``
    for a first turn or no skill; ``skills`` lists every skill the prompt held and the user turn
    it entered before (``{"block_id", "block_name", "turn"}``, turn 0 the first).
    """

    decision: AnswerDecision
    routed: str
    block_id: Optional[str]
    block_name: Optional[str]
    score: float
    threshold: float
    reason: str
    cache_n: int = 0
    reused_from: str = ""
    prefill_tokens_avoided: int = 0
    near_miss: bool = False
    gate: Optional[GateVerdict] = None
    conversation: str = ""
    skills: tuple[dict, ...] = ()

    def as_dict(self) -> dict:
        """The note as JSON takes it (the gate verdict as its own object)."""
        return {**asdict(self), "skills": [dict(skill) for skill in self.skills]}


# What a context reused for an answer: its own history, not the memory's decision.
REUSE_FIELDS = ("cache_n", "prefill_tokens_avoided", "reused_from")


def decision_of(note) -> dict:
    """A note (an :class:`AnswerNote` or its JSON) less :data:`REUSE_FIELDS`: what every door
    agrees on for the same chat, whatever its contexts held before."""
    fields = note.as_dict() if isinstance(note, AnswerNote) else dict(note)
    return {k: v for k, v in fields.items() if k not in REUSE_FIELDS}


@dataclass(frozen=True)
class AnswerEnd:
    """The last event of an answer: why it ended (``stop``, ``length``, or ``tool_calls``
    when the answer is the ``tool_calls`` it makes), its size, the generated steps and where
    the time went."""

    finish_reason: str
    completion_tokens: int
    prompt_tokens: int
    steps: tuple[TokenStep, ...] = field(default=(), repr=False)
    timings: Timings = field(default_factory=Timings)
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True)
class Answer:
    """A whole answer — what every answering verb returns (:meth:`~skillgraft.SkillMemory.answer`,
    ``generate``): its text, the note, how it ended, and what was recalled; the note's and the
    end's figures read on it by name (``decision``, ``block_id``, ``decoded_tokens``,
    ``prefill_tokens_avoided``, ``timings``, ``gate``, ``steps``)."""

    text: str
    note: AnswerNote
    end: AnswerEnd
    recall: Optional[Recall] = field(default=None, repr=False)

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return self.end.tool_calls

    @property
    def decision(self) -> str:
        """``exact``, ``graft``, ``fallback`` or ``abstain`` (:class:`AnswerNote`)."""
        return self.note.decision

    @property
    def block_id(self) -> Optional[str]:
        return self.note.block_id

    @property
    def decoded_tokens(self) -> int:
        return self.end.completion_tokens

    @property
    def prefill_tokens_avoided(self) -> int:
        return self.note.prefill_tokens_avoided

    @property
    def timings(self) -> Timings:
        return self.end.timings

    @property
    def gate(self) -> Optional[GateVerdict]:
        return self.note.gate

    @property
    def steps(self) -> list[TokenStep]:
        return list(self.end.steps)

    def as_dict(self) -> dict:
        """The answer as a JSON-ready dict (what the CLI's ``ask --json`` prints)."""
        return {
            "text": self.text, "decision": self.decision, "block_id": self.block_id,
            "decoded_tokens": self.decoded_tokens, "prefill_tokens_avoided": self.prefill_tokens_avoided,
            "timings": self.timings.as_dict(), "recall": self.recall.as_dict() if self.recall else None,
            "gate": self.gate.as_dict() if self.gate else None, "reason": self.note.reason,
            "finish_reason": self.end.finish_reason,
        }
