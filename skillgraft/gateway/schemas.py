"""Request bodies of the gateway, validated by pydantic; OpenAI's shapes where OpenAI has one."""

from __future__ import annotations

import json
from typing import Annotated, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from ..core.tools import MAX_TOOLS, OutputFormat, output_format, tool_calls_turn, tool_result_turn
from ..errors import FormatError

MAX_MESSAGES = 256
MAX_TEXT_CHARS = 200_000
MAX_STOP_STRINGS = 4
MAX_CHOICES = 8
# An expiry as a request gives it: an ISO 8601 time or a duration from now (skillgraft.core.expiry checks it).
ExpiryText = Annotated[str, Field(min_length=1, max_length=64)]


class TextPart(BaseModel):
    model_config = ConfigDict(strict=True)

    type: Literal["text"]
    text: Annotated[str, Field(max_length=MAX_TEXT_CHARS)]


ToolName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]


class CalledFunction(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    name: ToolName
    arguments: Annotated[str, Field(max_length=MAX_TEXT_CHARS)]


class CalledTool(BaseModel):
    """A tool call an assistant message made earlier in the chat."""

    model_config = ConfigDict(extra="ignore", strict=True)

    id: Annotated[str, Field(min_length=1, max_length=200)]
    type: Literal["function"] = "function"
    function: CalledFunction


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Union[None, Annotated[str, Field(max_length=MAX_TEXT_CHARS)], list[TextPart]] = None
    name: Optional[str] = None
    tool_calls: Optional[Annotated[list[CalledTool], Field(max_length=MAX_TOOLS)]] = None
    tool_call_id: Optional[Annotated[str, Field(max_length=200)]] = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)

    def pair(self) -> tuple[str, str]:
        return ("system" if self.role == "developer" else self.role, self.text())


class FunctionSpec(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    name: ToolName
    description: Optional[Annotated[str, Field(max_length=4_000)]] = None
    parameters: Optional[dict] = None
    strict: Optional[bool] = None


class ToolSpec(BaseModel):
    """A tool the model may call (OpenAI's function tool)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    type: Literal["function"]
    function: FunctionSpec


class ChosenFunction(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    name: ToolName


class NamedToolChoice(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    type: Literal["function"]
    function: ChosenFunction


class JsonSchemaSpec(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, populate_by_name=True)

    name: Annotated[str, Field(min_length=1, max_length=64)]
    description: Optional[str] = None
    json_schema: dict = Field(alias="schema")
    strict: Optional[bool] = None


class ResponseFormat(BaseModel):
    """``{"type": "text" | "json_object"}`` or ``{"type": "json_schema", "json_schema": {...}}``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    type: Literal["text", "json_object", "json_schema"]
    json_schema: Optional[JsonSchemaSpec] = None

    def as_dict(self) -> dict:
        if self.json_schema is None:
            return {"type": self.type}
        return {"type": self.type, "json_schema": {"name": self.json_schema.name, "schema": self.json_schema.json_schema}}


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    include_usage: Optional[bool] = None


class MemoryOptions(BaseModel):
    """skillgraft's own request field, ``"skillgraft": {"route": false, "cache_salt": "..."}``
    (the ``openai`` client's ``extra_body``): ``route`` false answers plainly, nothing
    recalled; ``cache_salt`` narrows prefix reuse to the requests that give the same salt (within
    the key's namespace), as vLLM's ``cache_salt`` does."""

    model_config = ConfigDict(extra="forbid", strict=True)

    route: bool = True
    cache_salt: Optional[str] = Field(default=None, min_length=1, max_length=256)


# OpenAI fields this gateway cannot honour, each with the values that ask for nothing (accepted);
# any other value is refused naming the field. ``null`` always means the default.
NO_OP_VALUES: dict[str, tuple] = {
    "frequency_penalty": (0.0,),
    "presence_penalty": (0.0,),
    "functions": ([],),
    "logprobs": (False,),
    "top_logprobs": (0,),
    "logit_bias": ({},),
    "modalities": (["text"],),
}
IGNORED = ("user", "store", "metadata")  # accepted and not used: they change nothing in an answer
MAX_METADATA = 16  # OpenAI's own bounds on ``metadata``: 16 pairs, keys of 64 and values of 512 characters


class ChatCompletionRequest(BaseModel):
    """``POST /v1/chat/completions``, strictly typed (``"3"`` is no number). Fields this gateway
    cannot honour are refused (:meth:`unsupported`), never silently ignored, and so is any
    field it does not know (``top_k``, ``min_p``, ``repetition_penalty``, ``echo``, ...)."""

    model_config = ConfigDict(extra="allow", strict=True)

    model: str
    messages: Annotated[list[ChatMessage], Field(min_length=1, max_length=MAX_MESSAGES)]
    max_tokens: Optional[Annotated[int, Field(ge=1)]] = None
    max_completion_tokens: Optional[Annotated[int, Field(ge=1)]] = None
    temperature: Optional[Annotated[float, Field(ge=0.0, le=2.0)]] = None
    seed: Optional[Annotated[int, Field(ge=0, le=2**31 - 1)]] = None
    stop: Union[None, Annotated[str, Field(max_length=200)], Annotated[list[Annotated[str, Field(max_length=200)]], Field(max_length=MAX_STOP_STRINGS)]] = None
    stream: Optional[bool] = False
    stream_options: Optional[StreamOptions] = None
    n: Optional[Annotated[int, Field(ge=1, le=MAX_CHOICES)]] = None
    user: Optional[Annotated[str, Field(max_length=256)]] = None
    store: Optional[bool] = None
    metadata: Optional[Annotated[dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=512)]],
                                 Field(max_length=MAX_METADATA)]] = None
    top_p: Optional[Annotated[float, Field(gt=0.0, le=1.0)]] = None
    frequency_penalty: Optional[float] = None
    presence_penalty: Optional[float] = None
    tools: Optional[Annotated[list[ToolSpec], Field(max_length=MAX_TOOLS)]] = None
    functions: Optional[list] = None
    tool_choice: Union[None, Literal["none", "auto", "required"], NamedToolChoice] = None
    parallel_tool_calls: Optional[bool] = None
    response_format: Optional[ResponseFormat] = None
    logprobs: Optional[bool] = None
    top_logprobs: Optional[int] = None
    logit_bias: Optional[dict] = None
    modalities: Optional[list[str]] = None
    skillgraft: Optional[MemoryOptions] = None

    def unsupported(self) -> Optional[str]:
        """The first field this gateway cannot do as set (an unknown field first), or None."""
        unknown = sorted(self.model_extra or {})
        if unknown:
            return unknown[0]
        for name, no_ops in NO_OP_VALUES.items():
            value = getattr(self, name)
            if value is not None and value not in no_ops:
                return name
        return None

    def chat(self) -> list[tuple[str, str]]:
        """The messages as ``(role, content)`` pairs: an assistant's tool calls and the tools'
        results written as :mod:`skillgraft.core.tools` renders them."""
        chat, called = [], {}
        for index, message in enumerate(self.messages):
            if message.role == "assistant" and message.tool_calls:
                calls = [(call.function.name, _arguments(call, index)) for call in message.tool_calls]
                called.update((call.id, call.function.name) for call in message.tool_calls)
                chat.append(("assistant", tool_calls_turn(calls, message.text())))
            elif message.role == "tool":
                name = message.name or called.get(message.tool_call_id or "")
                if name is None:
                    raise FormatError(f"messages.{index}.tool_call_id",
                                      f"{message.tool_call_id!r} answers no tool call of an earlier assistant message")
                chat.append(("tool", tool_result_turn(name, message.text())))
            else:
                chat.append(message.pair())
        return chat

    def output_format(self) -> Optional[OutputFormat]:
        """What the answer must look like (tools or JSON), or None for text; :class:`FormatError`
        names the field that cannot be honoured."""
        tools = [tool.function.model_dump(exclude_none=True) for tool in self.tools or ()]
        choice = self.tool_choice.model_dump() if isinstance(self.tool_choice, NamedToolChoice) else self.tool_choice
        form = self.response_format.as_dict() if self.response_format is not None else None
        return output_format(tools, choice, self.parallel_tool_calls, form)

    def route(self) -> bool:
        """Whether the memory recalls for this chat (``skillgraft.route``, true by default)."""
        return self.skillgraft is None or self.skillgraft.route

    def cache_salt(self) -> str:
        """The request's ``skillgraft.cache_salt`` (``""``: none)."""
        return (self.skillgraft.cache_salt or "") if self.skillgraft is not None else ""

    def stop_strings(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        stops = [self.stop] if isinstance(self.stop, str) else self.stop
        return tuple(s for s in stops if s)


def _arguments(call: CalledTool, index: int) -> dict:
    try:
        arguments = json.loads(call.function.arguments)
    except (ValueError, RecursionError):  # RecursionError: nested past the parser's depth
        arguments = None
    if not isinstance(arguments, dict):
        raise FormatError(f"messages.{index}.tool_calls", f"the arguments of call {call.id!r} are not a JSON object")
    return arguments


class ManualSkill(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    kind: Literal["manual"]
    name: Annotated[str, Field(min_length=1, max_length=200)]
    text: Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS)]
    description: Annotated[str, Field(max_length=2_000)] = ""
    examples: Annotated[list[Annotated[str, Field(max_length=2_000)]], Field(max_length=64)] = []
    capture: bool = False  # stored as text either way; true: its state is made now, in the background
    expires_at: Optional[ExpiryText] = None


class SolutionSkill(BaseModel):
    """A solution is verified here by running ``method`` in the sandbox: nothing else is trusted."""

    model_config = ConfigDict(extra="forbid", strict=True)

    kind: Literal["solution"]
    question: Annotated[str, Field(min_length=1, max_length=4_000)]
    answer: Annotated[str, Field(min_length=1, max_length=4_000)]
    method: Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS)]
    name: Optional[Annotated[str, Field(min_length=1, max_length=200)]] = None
    examples: Annotated[list[Annotated[str, Field(max_length=2_000)]], Field(max_length=64)] = []
    expires_at: Optional[ExpiryText] = None


NewSkill = Annotated[Union[ManualSkill, SolutionSkill], Field(discriminator="kind")]
