"""ChatSkillGraft: a LangChain chat model on a skillgraft memory's llama.cpp context.

Each call answers through the memory's one answer pipeline
(:meth:`skillgraft.SkillMemory.stream`), the same steps as the gateway and
``SkillMemory.generate``: the latest user message is recalled, and the answer is the
verified one (``exact``), generated after the routed block's restored state (``graft``,
or ``fallback`` when the graft did not stand) or generated plainly (``abstain``); the
decision is in ``response_metadata["skillgraft"]``. With a ``block_id`` (per call, through
``bind`` or set on the model) that block is grafted without a decision, as the memory grafts
a block it is given (:meth:`skillgraft.SkillMemory.forced_graft`: an expired one is refused,
a namespace's base is read); with
``route=False`` the chat is answered plainly. A ``recall`` passed per call is answered as
given: the middleware passes the one it dispatched on, which the memory made for the whole
chat (:meth:`skillgraft.SkillMemory.recall` with the earlier user turns), so the
conversation rule has judged it.

Tools (:meth:`ChatSkillGraft.bind_tools`) and structured output
(:meth:`ChatSkillGraft.with_structured_output`) go through the same pipeline as the
gateway's: the answer is held to a grammar of tool calls or of the schema
(:mod:`skillgraft.core.tools`), on a graft too.
"""

from __future__ import annotations

from contextlib import closing
import math
import os
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Sequence, Union

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LangSmithParams, LanguageModelInput
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.messages.tool import tool_call, tool_call_chunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from skillgraft.adapter import (
    AnswerEnd,
    AnswerNote,
    AnswerOptions,
    Confidence,
    OutputFormat,
    Recall,
    SkillMemory,
    TokenStep,
    ToolCall,
    default_home,
    default_model,
    output_format,
)

from .messages import to_chat
from .structured import structured
from .shared import memory_lock, open_memory, store_key

PROVIDER = "skillgraft"
# Per-call keyword arguments LangChain itself may pass along; they do not change a generation.
_PASSED_THROUGH = frozenset({"stream"})


def _stops(stop: Any) -> list[str]:
    """Stop sequences as a list: one text is one stop sequence, not one per character."""
    stops = [stop] if isinstance(stop, str) else list(stop)
    if not all(isinstance(s, str) for s in stops):
        raise ValueError(f"stop must be a text or a list of texts, got {stop!r}")
    return stops


@dataclass(frozen=True)
class CallOptions:
    """The settings of one generation: the model's fields overridden by call arguments."""

    block_id: Optional[str]
    max_tokens: int
    temperature: float
    seed: int
    stop: list[str]
    recall: Optional[Recall] = None
    gate: Optional[object] = None
    format: Optional[OutputFormat] = None


@dataclass
class Outcome:
    """What a finished generation cost and why it ended."""

    restored_tokens: int = 0
    prefilled_tokens: int = 0
    output_tokens: int = 0
    finish_reason: str = "stop"
    confidence: Optional[Confidence] = None
    steps: list[TokenStep] = field(default_factory=list, repr=False)
    note: Optional[AnswerNote] = None
    tool_calls: tuple[ToolCall, ...] = ()

    @property
    def usage(self) -> UsageMetadata:
        """Input tokens are the ones prefilled: a grafted block's tokens are restored, not counted."""
        return UsageMetadata(
            input_tokens=self.prefilled_tokens,
            output_tokens=self.output_tokens,
            total_tokens=self.prefilled_tokens + self.output_tokens,
        )

    def skillgraft_metadata(self) -> dict:
        """The pipeline's note (the same keys through every door), plus the tokens restored
        and prefilled (nothing, when nothing was generated)."""
        return {
            **(self.note.as_dict() if self.note is not None else {}),
            "restored_tokens": self.restored_tokens,
            "prefilled_tokens": self.prefilled_tokens,
            "confidence": self.confidence.as_dict() if self.confidence else None,
        }


class ChatSkillGraft(BaseChatModel):
    """A chat model that owns a skillgraft memory's llama.cpp context and can graft its blocks.

    Give it a ``memory``, or a store folder ``home`` (default ``$SKILLGRAFT_HOME``) and a
    ``model`` (default the embedded ``smollm2-135m``); memories opened by folder are shared
    per process, so building many instances is cheap. Calls on one memory are serialised.

    Example::

        chat = ChatSkillGraft(home="~/.skillgraft", max_tokens=64)
        chat.invoke("How do I squash three commits?", block_id="git-squash")
    """

    memory: Optional[SkillMemory] = Field(default=None, exclude=True, repr=False)
    """An open memory; when given, ``home`` and ``model`` are taken from it."""
    home: str = Field(default_factory=lambda: str(default_home()))
    """The store folder, used when no ``memory`` is given."""
    model: str = Field(default_factory=default_model)
    """The model name or GGUF path, used when no ``memory`` is given."""
    block_id: Optional[str] = None
    """A block (id, id prefix or name) to graft on every call; ``block_id=`` per call overrides it."""
    max_tokens: int = Field(default=256, ge=0)
    temperature: float = Field(default=0.0, ge=0.0)
    """0 decodes greedily."""
    seed: int = Field(default=0, ge=0)
    """Seeds sampling, so a seed reproduces a run."""
    stop: Optional[list[str]] = None
    """Stop sequences: the output is cut where the first one begins."""
    streaming: bool = False
    """Whether ``invoke`` streams internally (for callbacks)."""
    route: bool = True
    """Whether a call without ``block_id`` is answered by the memory (exact, graft, abstain);
    False answers every chat plainly."""

    model_config = ConfigDict(arbitrary_types_allowed=True, protected_namespaces=())

    @field_validator("home", "model", mode="before")
    @classmethod
    def _path_as_text(cls, value: Any) -> Any:
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    @model_validator(mode="after")
    def _adopt_memory(self) -> "ChatSkillGraft":
        memory = self.memory
        if memory is None:
            return self
        if "home" in self.model_fields_set and store_key(self.home) != store_key(memory.store.home):
            raise ValueError(f"home {self.home!r} is not the store of the given memory ({memory.store.home})")
        if "model" in self.model_fields_set and self.model != str(memory.model):
            raise ValueError(f"model {self.model!r} is not the model of the given memory ({memory.model})")
        self.home, self.model = str(memory.store.home), str(memory.model)
        return self

    @property
    def _llm_type(self) -> str:
        return PROVIDER

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "home": self.home,
            "block_id": self.block_id,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "seed": self.seed,
        }

    def _get_ls_params(self, stop: Optional[list[str]] = None, **kwargs: Any) -> LangSmithParams:
        params = LangSmithParams(
            ls_provider=PROVIDER,
            ls_model_name=str(kwargs.get("model") or self.model),
            ls_model_type="chat",
            ls_temperature=kwargs.get("temperature", self.temperature),
            ls_max_tokens=kwargs.get("max_tokens", self.max_tokens),
        )
        if stop or self.stop:
            params["ls_stop"] = list(stop or self.stop or [])
        return params

    @property
    def skill_memory(self) -> SkillMemory:
        """The memory this model generates with."""
        return self.memory if self.memory is not None else open_memory(self.home, self.model)

    # -- one generation --------------------------------------------------------------------

    def _options(self, stop: Optional[list[str]], kwargs: dict[str, Any]) -> CallOptions:
        kwargs = {k: v for k, v in kwargs.items() if k not in _PASSED_THROUGH and not k.startswith("ls_")}
        requested = kwargs.pop("model", None)
        if requested is not None and str(requested) != self.model:
            raise ValueError(
                f"ChatSkillGraft is pinned to {self.model!r} (its blocks are bound to that runtime); "
                f"for {requested!r} build another ChatSkillGraft(model={requested!r})"
            )
        options = CallOptions(
            block_id=kwargs.pop("block_id", self.block_id),
            max_tokens=int(kwargs.pop("max_tokens", self.max_tokens)),
            temperature=float(kwargs.pop("temperature", self.temperature)),
            seed=int(kwargs.pop("seed", self.seed)),
            stop=_stops(stop if stop is not None else self.stop or []),
            recall=kwargs.pop("recall", None),
            gate=kwargs.pop("gate", None),
            format=output_format(
                kwargs.pop("tools", None), kwargs.pop("tool_choice", None), kwargs.pop("parallel_tool_calls", None),
                kwargs.pop("response_format", None),
            ),
        )
        kwargs.pop("strict", None)  # a grammar is always strict
        if kwargs:
            known = ("block_id, max_tokens, temperature, seed, stop, recall, gate, tools, tool_choice, "
                     "parallel_tool_calls, response_format")
            raise TypeError(f"ChatSkillGraft got unexpected call arguments {sorted(kwargs)}; it takes {known}")
        if options.max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0, got {options.max_tokens}")
        if not math.isfinite(options.temperature) or options.temperature < 0:
            raise ValueError(f"temperature must be a number >= 0, got {options.temperature}")
        if options.seed < 0:
            raise ValueError(f"seed must be >= 0, got {options.seed}")
        return options

    def _pieces(self, messages: list[BaseMessage], options: CallOptions, outcome: Outcome) -> Iterator[str]:
        """Yield the output text as it is decoded; fill ``outcome`` once it ends. Every call
        goes through the answer pipeline: a ``block_id`` is a forced graft of that block,
        ``route=False`` a plain answer (nothing recalled), else the memory recalls for the last
        user message."""
        chat = to_chat(messages)
        memory = self.skill_memory
        with memory_lock(memory):
            if options.max_tokens == 0:
                return
            yield from self._answered(memory, chat, options, outcome)

    def _recall(self, memory: SkillMemory, options: CallOptions) -> Optional[Recall]:
        """The recall the call forces, or None to let the memory recall (or, with
        ``route=False``, answer plainly)."""
        if options.block_id is not None:
            if options.recall is not None:
                raise ValueError("give block_id or recall, not both")
            return memory.blocks.forced_graft(options.block_id, "block_id")  # the memory's own rule: expired is refused
        return options.recall

    def _answered(self, memory: SkillMemory, chat: list, options: CallOptions, outcome: Outcome) -> Iterator[str]:
        """The answer pipeline's answer, as every door makes it."""
        answer = AnswerOptions(
            max_tokens=options.max_tokens, temperature=options.temperature, seed=options.seed, stop=tuple(options.stop),
            format=options.format,
        )
        recall = self._recall(memory, options)
        route = self.route or recall is not None  # a block or recall given for the call wins
        with closing(memory.stream(chat, answer, gate=options.gate, recall=recall, route=route)) as events:
            for event in events:
                if isinstance(event, AnswerNote):
                    outcome.note = event
                elif isinstance(event, AnswerEnd):
                    outcome.tool_calls = event.tool_calls
                    outcome.steps.extend(event.steps)
                    outcome.output_tokens = event.completion_tokens
                    outcome.finish_reason = event.finish_reason
                    outcome.restored_tokens = outcome.note.cache_n
                    outcome.prefilled_tokens = event.prompt_tokens - outcome.note.cache_n
                elif event:
                    yield event
        gate = outcome.note.gate
        outcome.confidence = Confidence(gate.confident, gate.mean_logprob, gate.threshold, gate.reason) if gate else None

    def _response_metadata(self, outcome: Outcome) -> dict[str, Any]:
        return {
            "model_name": self.model,
            "model_provider": PROVIDER,
            "finish_reason": outcome.finish_reason,
            PROVIDER: outcome.skillgraft_metadata(),
        }

    # -- tools and structured output -------------------------------------------------------

    def bind_tools(
        self,
        tools: Sequence[Any],
        *,
        tool_choice: Union[str, bool, dict, None] = None,
        parallel_tool_calls: Optional[bool] = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """The model with ``tools`` (LangChain tools, functions, pydantic models or OpenAI tool
        dicts). ``tool_choice`` is ``"auto"``, ``"none"``, ``"any"``/``"required"``, ``True``
        (the one tool) or a tool's name; ``parallel_tool_calls=True`` allows several calls in
        one answer (one by default). The answer is held to a grammar of calls or a reply."""
        formatted = [convert_to_openai_tool(tool) for tool in tools]
        if tool_choice is True:
            if len(formatted) != 1:
                raise ValueError(f"tool_choice=True needs exactly one tool, got {len(formatted)}")
            tool_choice = formatted[0]["function"]["name"]
        elif tool_choice is False:
            tool_choice = None
        output_format(formatted, tool_choice, parallel_tool_calls)  # refuses now what it cannot do
        extra = {} if parallel_tool_calls is None else {"parallel_tool_calls": parallel_tool_calls}
        return self.bind(tools=formatted, tool_choice=tool_choice, **extra, **kwargs)

    def with_structured_output(
        self,
        schema: Union[dict, type],
        *,
        method: str = "json_schema",
        include_raw: bool = False,
        strict: Optional[bool] = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, Union[dict, BaseModel]]:
        """The model answering as ``schema`` (a pydantic model, TypedDict or JSON schema):
        ``method="json_schema"`` holds the answer to the schema's JSON, ``"function_calling"``
        to a call of a tool with it as arguments, ``"json_mode"`` to any JSON object."""
        if kwargs:
            raise ValueError(f"with_structured_output got unexpected arguments {sorted(kwargs)}")
        return structured(self, schema, method, include_raw)

    # -- LangChain hooks -------------------------------------------------------------------

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: Optional[list[str]] = None,
        run_manager: Optional[CallbackManagerForLLMRun] = None,
        **kwargs: Any,
    ) -> ChatResult:
        options = self._options(stop, kwargs)
        outcome = Outcome()
        text = "".join(self._pieces(messages, options, outcome))
        calls = [tool_call(name=c.name, args=dict(c.arguments), id=c.id) for c in outcome.tool_calls]
        message = AIMessage(
            content=text, tool_calls=calls, usage_metadata=outcome.usage, response_metadata=self._response_metadata(outcome)
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: Optional[list[str]] = None,
        run_manager: Optional[CallbackManagerForLLMRun] = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        options = self._options(stop, kwargs)
        outcome = Outcome()
        for text in self._pieces(messages, options, outcome):
            chunk = ChatGenerationChunk(message=AIMessageChunk(content=text))
            if run_manager:
                run_manager.on_llm_new_token(text, chunk=chunk)
            yield chunk
        calls = [tool_call_chunk(name=c.name, args=c.arguments_json, id=c.id, index=i)
                 for i, c in enumerate(outcome.tool_calls)]
        yield ChatGenerationChunk(
            message=AIMessageChunk(
                content="",
                tool_call_chunks=calls,
                usage_metadata=outcome.usage,
                response_metadata=self._response_metadata(outcome),
                chunk_position="last",
            )
        )
