"""Tools and structured output: what an answer must look like, and how a model is held to it.

skillgraft gives every model one tool-call format that both engines render alike: the tools
are described in the app's system prompt (the prefix a context keeps; skills come after it),
and the answer is constrained by a grammar (:mod:`skillgraft.core.json_grammar`) to either
plain text (a reply, which never opens with ``{``) or one JSON object
``{"tool_calls": [{"name": ..., "arguments": {...}}]}`` that calls tools (``required`` or a
named ``tool_choice``: the object only). The reply comes first and as text because small
models follow whichever form they are shown first: offered two JSON envelopes, they call a
tool for "Say hello." (measured: ``benchmarks/tool_choice_eval.py``, docs/benchmarks.md). A
call cut short (``max_tokens``) is no call at all (no half call is ever made; the answer's
``finish_reason`` ``length`` says why). A response format (``json_object``, ``json_schema``)
constrains the answer to JSON of that schema, which is the answer's text.
The same grammar goes to the in-process sampler and to llama-server, so both engines give
the same tokens.

An assistant's earlier tool calls are written back into a chat as the JSON it would have
written (:func:`tool_calls_turn`) and a tool's result as a user turn
(:func:`tool_result_turn`): every door renders a conversation with tools through these.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from ..errors import FormatError
from .json_grammar import schema_grammar

TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
MAX_TOOLS = 64
MAX_DESCRIPTION_CHARS = 4_000
TOOL_CHOICES = ("auto", "none", "required")
EMPTY_PARAMETERS = {"type": "object", "properties": {}}
# With tool_choice auto: the calls' grammar, or text that does not open with "{" (nor blank).
REPLY_OR_CALL = '\nroot ::= call-envelope | plain-reply\nplain-reply ::= [^{ \\t\\n] [^\\x00]*\n'


@dataclass(frozen=True)
class Tool:
    """A function the model may call: its name, what it does, and its arguments' JSON schema."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: dict(EMPTY_PARAMETERS))

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not TOOL_NAME.match(self.name):
            raise FormatError("tools", f"a tool name must be 1-64 letters, digits, '_', '.' or '-', got {self.name!r}")
        if not isinstance(self.description, str) or len(self.description) > MAX_DESCRIPTION_CHARS:
            raise FormatError("tools", f"the description of tool {self.name!r} must be text of at most {MAX_DESCRIPTION_CHARS} characters")
        if not isinstance(self.parameters, Mapping) or self.parameters.get("type", "object") != "object":
            raise FormatError("tools", f"the parameters of tool {self.name!r} must be a JSON schema of an object")

    @classmethod
    def from_openai(cls, spec: Mapping[str, Any]) -> "Tool":
        """A tool from OpenAI's ``{"type": "function", "function": {...}}`` (or the inner object)."""
        function = spec.get("function", spec) if isinstance(spec, Mapping) else None
        if not isinstance(function, Mapping) or (isinstance(spec, Mapping) and spec.get("type", "function") != "function"):
            raise FormatError("tools", "a tool must be {'type': 'function', 'function': {'name': ..., 'parameters': ...}}")
        parameters = function.get("parameters") or dict(EMPTY_PARAMETERS)
        return cls(function.get("name"), function.get("description") or "", parameters)

    def describe(self) -> str:
        line = {"name": self.name, "description": self.description, "parameters": self.parameters}
        return json.dumps(line, ensure_ascii=False)


@dataclass(frozen=True)
class ToolCall:
    """One call the model made: an id for the tool's result to answer, a name, the arguments."""

    id: str
    name: str
    arguments: Mapping[str, Any]

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False)

    def as_openai(self) -> dict:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments_json}}


@dataclass(frozen=True)
class Parsed:
    """An answer read against its format: its text and the tool calls it makes."""

    content: str
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True)
class OutputFormat:
    """What an answer must look like: tool calls or a reply (``tools``), or JSON (``schema``).

    ``tool_choice`` is ``auto`` (call tools or reply), ``required`` (call at least one) or
    a tool's name (call that one); ``parallel`` allows several calls in one answer.
    ``schema`` is a response format's JSON schema (``{"type": "object"}`` for
    ``json_object``). Build one with :func:`output_format`.
    """

    tools: tuple[Tool, ...] = ()
    tool_choice: str = "auto"
    parallel: bool = True
    schema: Optional[Mapping[str, Any]] = None
    grammar: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        if bool(self.tools) == (self.schema is not None):
            raise FormatError("tools", "a format has either tools or a response schema")
        names = [tool.name for tool in self.tools]
        if self.tools and self.tool_choice not in ("auto", "required") and self.tool_choice not in names:
            raise FormatError("tool_choice", f"names no tool of this request: {self.tool_choice!r} (tools: {', '.join(names)})")
        if not self.grammar:
            object.__setattr__(self, "grammar", self._grammar())

    @property
    def demands_structure(self) -> bool:
        """Whether a plain text answer cannot do (JSON, or a tool call that must be made):
        a verified answer is then grafted and written in this format, not returned as it is."""
        return not self.tools or self.tool_choice != "auto"

    def _calls_schema(self) -> dict:
        tools = [tool for tool in self.tools if self.tool_choice in ("auto", "required", tool.name)]
        call = [{"type": "object", "additionalProperties": False, "required": ["name", "arguments"], "properties": {
            "name": {"const": tool.name}, "arguments": dict(tool.parameters)}} for tool in tools]
        calls: dict = {"type": "array", "minItems": 1, "items": call[0] if len(call) == 1 else {"anyOf": call}}
        if not self.parallel or self.tool_choice not in ("auto", "required"):
            calls["maxItems"] = 1
        return {"type": "object", "additionalProperties": False, "required": ["tool_calls"], "properties": {"tool_calls": calls}}

    def _grammar(self) -> str:
        if not self.tools:
            return schema_grammar(dict(self.schema), "response_format")
        calls = schema_grammar(self._calls_schema(), "tools")
        if self.tool_choice != "auto":
            return calls
        return re.sub(r"^root ::=", "call-envelope ::=", calls, count=1, flags=re.M) + REPLY_OR_CALL

    def instructions(self) -> str:
        """What the model is told, at the end of the app's system prompt (:meth:`lead`)."""
        if not self.tools:
            if self.schema == {"type": "object"}:
                return "Reply with a JSON object only."
            return "Reply with JSON only, matching this JSON schema: " + json.dumps(self.schema, ensure_ascii=False)
        listed = "\n".join(tool.describe() for tool in self.tools)
        call = '{"tool_calls": [{"name": "<tool>", "arguments": {...}}]}'
        if self.tool_choice == "auto":
            how = f"To call functions, reply with only the JSON object {call}. If no function is needed, answer in plain text."
        elif self.tool_choice == "required":
            how = f"Reply with one JSON object that calls functions: {call}."
        else:
            how = f'Reply with one JSON object that calls {self.tool_choice}: {{"tool_calls": [{{"name": "{self.tool_choice}", "arguments": {{...}}}}]}}.'
        return ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                f"<tools>\n{listed}\n</tools>\n\n{how}")

    def lead(self, chat: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        """``chat`` with :meth:`instructions` as part of the app's prefix: after the text of its
        last leading system turn (a blank line between), or as a system turn of its own in front
        when it has none. Skills follow the prefix, so the tools are never prefilled again behind
        a new skill; the chat keeps its number of turns unless one is put in front."""
        chat = list(chat)
        lead = next((i for i, (role, _) in enumerate(chat) if role != "system"), len(chat))
        if not lead:
            return [("system", self.instructions()), *chat]
        chat[lead - 1] = ("system", f"{chat[lead - 1][1]}\n\n{self.instructions()}")
        return chat

    def parse(self, text: str) -> Parsed:
        """The answer's text and tool calls. JSON formats keep the text as it is. With tools,
        text that opens with ``{`` is a call envelope: one cut short is no call and no text
        (never its JSON); other text is the reply, as it is."""
        if not self.tools or not opens_a_call(text):
            return Parsed(text)
        try:
            envelope = json.loads(text, strict=False)
        except ValueError:
            return Parsed("")
        if not isinstance(envelope, dict):
            return Parsed(text)
        calls = envelope.get("tool_calls")
        if not isinstance(calls, list):
            return Parsed(text)
        return Parsed("", tuple(
            ToolCall(new_call_id(), str(call.get("name")), call.get("arguments") or {})
            for call in calls if isinstance(call, dict)
        ))


def opens_a_call(text: str) -> bool:
    """Whether an answer under tools is (so far) a call envelope, not a reply: its first
    character that is not blank is ``{``."""
    stripped = text.lstrip()
    return stripped.startswith("{")


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


def output_format(
    tools: Optional[Sequence[Any]] = None,
    tool_choice: Any = None,
    parallel_tool_calls: Optional[bool] = None,
    response_format: Optional[Mapping[str, Any]] = None,
) -> Optional[OutputFormat]:
    """The format of OpenAI-shaped request fields, or None for a plain text answer.

    ``tools`` are :class:`Tool` s or OpenAI tool objects; ``tool_choice`` is ``auto``,
    ``none`` (tools are not offered), ``required``, a tool name or
    ``{"type": "function", "function": {"name": ...}}``; ``response_format`` is
    ``{"type": "text" | "json_object" | "json_schema", ...}``. :class:`FormatError` names
    the field that cannot be honoured.
    """
    choice = _choice(tool_choice)
    schema = _response_schema(response_format)
    tools = _distinct(tool if isinstance(tool, Tool) else Tool.from_openai(tool) for tool in tools or ())
    if len(tools) > MAX_TOOLS:
        raise FormatError("tools", f"at most {MAX_TOOLS} tools are taken, got {len(tools)}")
    if not tools and choice not in ("auto", "none"):
        raise FormatError("tool_choice", f"{choice!r} needs tools, and the request has none")
    if choice == "none":
        tools = []
    if tools and schema is not None:
        raise FormatError("response_format", "a JSON response format together with tools is not supported: send one or the other")
    if not tools and schema is None:
        return None
    parallel = bool(parallel_tool_calls)  # one call per answer unless asked, as llama-server
    return OutputFormat(tuple(tools), choice if tools else "auto", parallel, schema)


def _distinct(tools) -> list[Tool]:
    """The tools, each given twice (a pydantic model and its schema, say) kept once."""
    kept: dict = {}
    for tool in tools:
        kept.setdefault((tool.name, tool.description, json.dumps(tool.parameters, sort_keys=True, default=str)), tool)
    return list(kept.values())


def _choice(tool_choice: Any) -> str:
    if tool_choice is None:
        return "auto"
    if isinstance(tool_choice, str):
        if tool_choice == "any":  # LangChain's name for "required"
            return "required"
        if tool_choice in TOOL_CHOICES or TOOL_NAME.match(tool_choice):
            return tool_choice
    if isinstance(tool_choice, Mapping) and tool_choice.get("type") == "function":
        name = (tool_choice.get("function") or {}).get("name")
        if isinstance(name, str):
            return name
    raise FormatError("tool_choice", f"must be auto, none, required or a function by name, got {tool_choice!r}")


def _response_schema(response_format: Optional[Mapping[str, Any]]) -> Optional[dict]:
    if response_format is None:
        return None
    kind = response_format.get("type") if isinstance(response_format, Mapping) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, Mapping) else None
        if not isinstance(schema, Mapping):
            raise FormatError("response_format", "json_schema needs {'json_schema': {'name': ..., 'schema': {...}}}")
        return dict(schema)
    raise FormatError("response_format", f"type must be text, json_object or json_schema, got {kind!r}")


def tool_calls_turn(calls: Sequence[tuple[str, Mapping[str, Any]]], text: str = "") -> str:
    """An assistant turn that called tools, as the model writes it: ``(name, arguments)`` pairs."""
    envelope = json.dumps({"tool_calls": [{"name": name, "arguments": dict(arguments)} for name, arguments in calls]},
                          ensure_ascii=False)
    return f"{text}\n{envelope}" if text else envelope


def tool_result_turn(name: str, content: str) -> str:
    """A tool's result, as the user turn (role ``tool``) that follows the call."""
    return f"Tool {name} returned: {content}"
