"""Request bodies of the gateway, validated by pydantic; OpenAI's shapes where OpenAI has one."""

from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

MAX_MESSAGES = 256
MAX_TEXT_CHARS = 200_000
MAX_STOP_STRINGS = 4


class TextPart(BaseModel):
    type: Literal["text"]
    text: Annotated[str, Field(max_length=MAX_TEXT_CHARS)]


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

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
    model_config = ConfigDict(extra="ignore")

    include_usage: Optional[bool] = None


class ChatCompletionRequest(BaseModel):
    """``POST /v1/chat/completions``. Fields this gateway cannot honour are refused
    (:meth:`unsupported`), never silently ignored; ``null`` means the default."""

    model_config = ConfigDict(extra="allow")

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
    top_p: Optional[Annotated[float, Field(gt=0.0, le=1.0)]] = None
    tools: Optional[list] = None

    def unsupported(self) -> Optional[str]:
        """The first field set to something this gateway cannot do, or None."""
        extra = self.model_extra or {}
        checks = {
            "tools": bool(self.tools),
            "functions": bool(extra.get("functions")),
            "tool_choice": extra.get("tool_choice") not in (None, "none", "auto"),
            "response_format": extra.get("response_format") not in (None, {"type": "text"}),
            "logprobs": bool(extra.get("logprobs")),
            "top_logprobs": bool(extra.get("top_logprobs")),
            "logit_bias": bool(extra.get("logit_bias")),
            "audio": extra.get("audio") is not None,
            "modalities": extra.get("modalities") not in (None, ["text"]),
            "prediction": extra.get("prediction") is not None,
        }
        return next((name for name, refused in checks.items() if refused), None)

    def stop_strings(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        stops = [self.stop] if isinstance(self.stop, str) else self.stop
        return tuple(s for s in stops if s)


class ManualSkill(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["manual"]
    name: Annotated[str, Field(min_length=1, max_length=200)]
    text: Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS)]
    description: Annotated[str, Field(max_length=2_000)] = ""
    examples: Annotated[list[Annotated[str, Field(max_length=2_000)]], Field(max_length=64)] = []


class SolutionSkill(BaseModel):
    """A solution is verified here by running ``method`` in the sandbox: nothing else is trusted."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["solution"]
    question: Annotated[str, Field(min_length=1, max_length=4_000)]
    answer: Annotated[str, Field(min_length=1, max_length=4_000)]
    method: Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS)]
    name: Optional[Annotated[str, Field(min_length=1, max_length=200)]] = None
    examples: Annotated[list[Annotated[str, Field(max_length=2_000)]], Field(max_length=64)] = []


NewSkill = Annotated[Union[ManualSkill, SolutionSkill], Field(discriminator="kind")]
