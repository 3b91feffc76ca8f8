"""Request bodies of the gateway, validated by pydantic; OpenAI's shapes where OpenAI has one."""

from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

MAX_MESSAGES = 256
MAX_TEXT_CHARS = 200_000
MAX_STOP_STRINGS = 4


class TextPart(BaseModel):
    model_config = ConfigDict(strict=True)

    type: Literal["text"]
    text: Annotated[str, Field(max_length=MAX_TEXT_CHARS)]


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    role: Literal["system", "developer", "user", "assistant"]
    content: Union[Annotated[str, Field(max_length=MAX_TEXT_CHARS)], list[TextPart]]
    name: Optional[str] = None

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)

    def pair(self) -> tuple[str, str]:
        return ("system" if self.role == "developer" else self.role, self.text())


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    include_usage: Optional[bool] = None


# OpenAI fields this gateway cannot honour, each with the values that ask for nothing (accepted);
# any other value is refused naming the field. ``null`` always means the default.
NO_OP_VALUES: dict[str, tuple] = {
    "frequency_penalty": (0.0,),
    "presence_penalty": (0.0,),
    "tools": ([],),
    "functions": ([],),
    "tool_choice": ("none", "auto"),
    "parallel_tool_calls": (True, False),
    "response_format": ({"type": "text"},),
    "logprobs": (False,),
    "top_logprobs": (0,),
    "logit_bias": ({},),
    "modalities": (["text"],),
}
IGNORED = ("user",)  # accepted and not used: they change nothing in an answer


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
    n: Optional[Annotated[int, Field(ge=1, le=1)]] = None
    user: Optional[str] = None
    top_p: Optional[Annotated[float, Field(gt=0.0, le=1.0)]] = None
    frequency_penalty: Optional[float] = None
    presence_penalty: Optional[float] = None
    tools: Optional[list] = None
    functions: Optional[list] = None
    tool_choice: Union[None, str, dict] = None
    parallel_tool_calls: Optional[bool] = None
    response_format: Optional[dict] = None
    logprobs: Optional[bool] = None
    top_logprobs: Optional[int] = None
    logit_bias: Optional[dict] = None
    modalities: Optional[list[str]] = None

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

    def stop_strings(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        stops = [self.stop] if isinstance(self.stop, str) else self.stop
        return tuple(s for s in stops if s)


class ManualSkill(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    kind: Literal["manual"]
    name: Annotated[str, Field(min_length=1, max_length=200)]
    text: Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS)]
    description: Annotated[str, Field(max_length=2_000)] = ""
    examples: Annotated[list[Annotated[str, Field(max_length=2_000)]], Field(max_length=64)] = []


class SolutionSkill(BaseModel):
    """A solution is verified here by running ``method`` in the sandbox: nothing else is trusted."""

    model_config = ConfigDict(extra="forbid", strict=True)

    kind: Literal["solution"]
    question: Annotated[str, Field(min_length=1, max_length=4_000)]
    answer: Annotated[str, Field(min_length=1, max_length=4_000)]
    method: Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS)]
    name: Optional[Annotated[str, Field(min_length=1, max_length=200)]] = None
    examples: Annotated[list[Annotated[str, Field(max_length=2_000)]], Field(max_length=64)] = []


NewSkill = Annotated[Union[ManualSkill, SolutionSkill], Field(discriminator="kind")]
