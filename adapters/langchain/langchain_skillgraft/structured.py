"""Structured output for :class:`~langchain_skillgraft.ChatSkillGraft`: the model bound to a
tool or a response format (held to its grammar by the answer pipeline) and a parser."""

from __future__ import annotations

from operator import itemgetter
from typing import Any, Union

from langchain_core.output_parsers import JsonOutputParser, PydanticOutputParser
from langchain_core.output_parsers.openai_tools import JsonOutputKeyToolsParser, PydanticToolsParser
from langchain_core.runnables import Runnable, RunnableMap, RunnablePassthrough
from langchain_core.utils.function_calling import convert_to_json_schema, convert_to_openai_tool
from langchain_core.utils.pydantic import is_basemodel_subclass
from skillgraft.adapter import output_format

METHODS = ("json_schema", "function_calling", "json_mode")


def structured(model: Any, schema: Union[dict, type], method: str, include_raw: bool) -> Runnable:
    """``model`` answering as ``schema``: see :meth:`ChatSkillGraft.with_structured_output`."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    pydantic_schema = is_basemodel_subclass(schema)  # pydantic 2, or its v1 models
    traced = {"ls_structured_output_format": {"kwargs": {"method": method}, "schema": convert_to_json_schema(schema)}}
    if method == "function_calling":
        tool = convert_to_openai_tool(schema)
        name = tool["function"]["name"]
        llm = model.bind_tools([tool], tool_choice=name, **traced)
        parser = (PydanticToolsParser(tools=[schema], first_tool_only=True) if pydantic_schema
                  else JsonOutputKeyToolsParser(key_name=name, first_tool_only=True))
    else:
        json_schema = convert_to_json_schema(schema)
        form = ({"type": "json_object"} if method == "json_mode" else
                {"type": "json_schema", "json_schema": {"name": json_schema.get("title", "output"), "schema": json_schema}})
        output_format(response_format=form)  # refuses now what it cannot do
        llm = model.bind(response_format=form, **traced)
        parser = PydanticOutputParser(pydantic_object=schema) if pydantic_schema else JsonOutputParser()
    if not include_raw:
        return llm | parser
    parsed = RunnablePassthrough.assign(parsed=itemgetter("raw") | parser, parsing_error=lambda _: None)
    failed = RunnablePassthrough.assign(parsed=lambda _: None)
    return RunnableMap(raw=llm) | parsed.with_fallbacks([failed], exception_key="parsing_error")
