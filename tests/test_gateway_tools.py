"""Tools, structured output and ``n`` through every door, on the real model and llama-server.

The ``openai`` client gets tool calls (streamed and not), JSON that validates against its
schema and several choices from ``skillgraft serve``, grafts reporting the block's cells
reused; a LangChain agent with a calculator tool runs a task of a tool call and an answer
with the skill memory three ways — ``ChatSkillGraft``, ``ChatOpenAI`` on the gateway, and a
scripted model skillgraft does not run — plus ``chat_model=ChatSkillGraft`` for an agent
whose own model is another one.

The embedded 135M model never stops calling a tool on its own, so the agents here allow one
tool round (:class:`OneToolRound`: after a tool's result the model must answer, as
``tool_choice="none"``); the tool call itself and its arguments are the model's.
"""

from __future__ import annotations

import ast
import json
import operator

import pytest

from tests.conftest import GIT_MANUAL, doc_block
from tests.required import need
from tests.required import require_llama_server

openai = need("openai", "skillgraft[dev]")
jsonschema = need("jsonschema", "skillgraft[dev]")
need("langchain_skillgraft", "langchain-skillgraft")

from langchain.agents import create_agent  # noqa: E402
from langchain.agents.middleware import AgentMiddleware  # noqa: E402
from langchain_core.callbacks import BaseCallbackHandler  # noqa: E402
from langchain_core.language_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langchain_skillgraft import ChatSkillGraft, SkillGraftMiddleware  # noqa: E402

from skillgraft.core.answer import AnswerOptions  # noqa: E402
from skillgraft.core.tools import output_format  # noqa: E402

MODEL = "smollm2-135m"
MAX_TOKENS = 64
CALCULATOR_MANUAL = (
    "Skill manual: arithmetic with the calculator tool. Never compute in your head: for any sum or product, "
    "call the calculator tool with the whole expression, for example 12*7+5. When the tool returns a number, "
    "answer with that number."
)
TASK = "What is 12 times 7, plus 5? Use the calculator."
SOLVED = "What is 17 * 23?"
CALCULATOR = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression such as 12*7+5",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string", "maxLength": 40}},
                   "required": ["expression"]},
}}
COMMAND_SCHEMA = {"type": "object", "properties": {"command": {"type": "string", "maxLength": 40}},
                  "required": ["command"], "additionalProperties": False}
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression such as 12*7+5."""

    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.left), value(node.right))
        raise ValueError("not arithmetic")

    try:
        return str(value(ast.parse(expression.replace("x", "*"), mode="eval").body))
    except (SyntaxError, ValueError, ZeroDivisionError):
        return f"error: {expression!r} is not an arithmetic expression"


class Seen(BaseCallbackHandler):
    """The messages each chat model run was given."""

    def __init__(self) -> None:
        self.messages = []

    def on_chat_model_start(self, serialized, messages, **kwargs) -> None:
        self.messages.append(messages[0])


class OneToolRound(AgentMiddleware):
    """The first round calls a tool (``tool_choice="required"``: offered the choice, the 135M
    model answers in text, as it does under plain llama-server); after the tool's result the
    model answers (``tool_choice="none"``)."""

    def wrap_model_call(self, request, handler):
        answered = request.messages and isinstance(request.messages[-1], ToolMessage)
        return handler(request.override(tool_choice="none" if answered else "required"))


class ScriptedToolModel(GenericFakeChatModel):
    """A tool-calling chat model skillgraft does not run: its messages are scripted."""

    def bind_tools(self, tools, **kwargs):
        return self


@pytest.fixture(scope="module")
def store(tmp_path_factory, smollm2, embedder):
    from skillgraft.memory import SkillMemory

    home = tmp_path_factory.mktemp("tools") / "store"
    with SkillMemory(home, engine=smollm2, embedder=embedder) as memory:
        memory.add_manual("calculator", CALCULATOR_MANUAL, examples=["what is 12 times 7?", "compute 345 * 12"])
        memory.add_manual("git-squash", GIT_MANUAL, examples=["how do I squash my last commits?"])
        memory.add_solution(SOLVED, "391", method="print(17 * 23)", verifier="python")
        blocks = {block.name: block for block in memory.blocks.list()}
    return home, blocks


@pytest.fixture(scope="module")
def memory(store, smollm2, embedder):
    from skillgraft.memory import SkillMemory

    with SkillMemory(store[0], engine=smollm2, embedder=embedder) as memory:
        yield memory


@pytest.fixture(scope="module")
def gateway(store, tmp_path_factory):
    from skillgraft.bench.serve import GatewayProcess

    require_llama_server()
    process = GatewayProcess(store[0], servers=1, model=MODEL, log_path=tmp_path_factory.mktemp("gwlog") / "gateway.log")
    try:
        yield process
    finally:
        assert process.stop() == 0


@pytest.fixture(scope="module")
def client(gateway):
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def _calls(message) -> list:
    return [(call.function.name, json.loads(call.function.arguments)) for call in message.tool_calls or ()]


# -- the openai client ------------------------------------------------------------------------


def test_a_graft_with_tools_gives_the_in_process_tool_call(client, store, memory):
    _, blocks = store
    response = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": TASK}], tools=[CALCULATOR], tool_choice="required",
        max_tokens=MAX_TOKENS, temperature=0,
    )
    note, choice = response.skillgraft, response.choices[0]
    assert note["decision"] == "graft" and note["block_name"] == "calculator"
    # the tools are the app's prefix (a system turn of their own here): the manual is placed after them
    assert [(s["block_name"], s["turn"]) for s in note["skills"]] == [("calculator", 0)]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    calls = _calls(choice.message)
    assert [name for name, _ in calls] == ["calculator"] and choice.message.tool_calls[0].id.startswith("call_")
    direct = memory.answer([("user", TASK)], AnswerOptions(max_tokens=MAX_TOKENS, format=output_format([CALCULATOR], "required")))
    assert [(c.name, dict(c.arguments)) for c in direct.tool_calls] == calls  # one grammar, both engines

    chunks = list(client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": TASK}], tools=[CALCULATOR], tool_choice="required",
        max_tokens=MAX_TOKENS, temperature=0, stream=True,
    ))
    streamed = [call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or ()]
    assert [(call.function.name, json.loads(call.function.arguments)) for call in streamed] == calls
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert len({c.model_extra["skillgraft"]["cache_n"] for c in chunks}) == 1
    assert chunks[0].model_extra["skillgraft"]["skills"] == note["skills"]


def test_a_tool_result_is_read_and_answered(client, store):
    call = {"id": "call_1", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "12*7+5"}'}}
    messages = [{"role": "system", "content": "You are a terse assistant."}, {"role": "user", "content": TASK},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "content": "89"}]
    response = client.chat.completions.create(model=MODEL, messages=messages, tools=[CALCULATOR], tool_choice="none",
                                              max_tokens=24, temperature=0)
    assert response.skillgraft["decision"] == "graft" and response.skillgraft["block_name"] == "calculator"
    assert response.choices[0].message.content and not response.choices[0].message.tool_calls
    assert [s["block_name"] for s in response.skillgraft["skills"]] == ["calculator"]  # after the prompt and tools


def test_a_tool_result_is_fed_back_in_process_as_the_api_page_shows(memory):
    scope = {"memory": memory}
    exec(compile(doc_block("api.md", "### A tool's result, fed back"), "docs/api.md", "exec"), scope)
    chat, answer = scope["chat"], scope["answer"]
    assert [role for role, _ in chat] == ["user", "assistant", "tool"]  # the model called the tool
    (call,) = json.loads(chat[1][1])["tool_calls"]
    assert call["name"] == "multiply" and chat[2] == ("tool", f"Tool multiply returned: {call['arguments']['a'] * call['arguments']['b']}")
    assert answer.text and not answer.tool_calls and answer.note.decision == "graft"


def test_a_tool_call_cut_by_max_tokens_is_no_call_in_process(memory):
    form = output_format([CALCULATOR], "required")
    cut = memory.answer([("user", TASK)], AnswerOptions(max_tokens=8, format=form))
    assert (cut.text, cut.tool_calls, cut.end.finish_reason, cut.end.completion_tokens) == ("", (), "length", 8)


def test_json_schema_output_validates_and_json_object_is_an_object(client, store):
    form = {"type": "json_schema", "json_schema": {"name": "command", "schema": COMMAND_SCHEMA}}
    question = "How do I squash my last three commits with git?"
    response = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": question}],
                                              response_format=form, max_tokens=MAX_TOKENS, temperature=0)
    jsonschema.validate(json.loads(response.choices[0].message.content), COMMAND_SCHEMA)
    assert response.skillgraft["decision"] == "graft" and response.skillgraft["skills"][0]["block_name"] == "git-squash"
    loose = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": question}],
                                           response_format={"type": "json_object"}, max_tokens=MAX_TOKENS, temperature=0)
    assert loose.choices[0].finish_reason == "length" or isinstance(json.loads(loose.choices[0].message.content), dict)


def test_several_choices_each_graft(client, store):
    block = store[1]["git-squash"]
    messages = [{"role": "user", "content": "How do I squash my last three commits with git?"}]
    response = client.chat.completions.create(model=MODEL, messages=messages, n=2, temperature=0.9, seed=7, max_tokens=12)
    assert [c.index for c in response.choices] == [0, 1]
    assert all(c.model_extra["skillgraft"]["cache_n"] >= block.n_tokens for c in response.choices)
    assert response.choices[0].message.content != response.choices[1].message.content  # seeds 7 and 8
    assert response.usage.completion_tokens == 24
    chunks = list(client.chat.completions.create(model=MODEL, messages=messages, n=2, temperature=0.9, seed=7,
                                                 max_tokens=12, stream=True))
    texts = {}
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
    assert texts == {c.index: c.message.content for c in response.choices}


def test_an_exact_question_with_tools_is_the_verified_answer(client):
    response = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": SOLVED}],
                                              tools=[CALCULATOR], max_tokens=MAX_TOKENS)
    assert response.skillgraft["decision"] == "exact" and response.choices[0].message.content == "391"
    assert not response.choices[0].message.tool_calls and response.usage.completion_tokens == 0
    demanded = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": SOLVED}],
                                              tools=[CALCULATOR], tool_choice="required", max_tokens=MAX_TOKENS)
    assert demanded.skillgraft["decision"] == "graft" and demanded.choices[0].message.tool_calls


@pytest.mark.parametrize("extra, param", [
    ({"tools": [{**CALCULATOR, "function": {**CALCULATOR["function"], "parameters": {
        "type": "object", "properties": {"x": {"$ref": "#/nowhere"}}}}}]}, "tools"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/nowhere"}}}},
     "response_format"),
    ({"tools": [CALCULATOR], "tool_choice": {"type": "function", "function": {"name": "search"}}}, "tool_choice"),
])
def test_a_format_the_model_cannot_be_held_to_is_a_400_naming_the_field(client, extra, param):
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": TASK}], **extra)
    assert raised.value.body["param"] == param


# -- LangChain agents ---------------------------------------------------------------------------


def _run(agent) -> list:
    return agent.invoke({"messages": [HumanMessage(TASK)]})["messages"]


def _tool_round(messages) -> tuple[AIMessage, ToolMessage, AIMessage]:
    """The run's tool call, the tool's result and the answer."""
    calls = [m for m in messages if isinstance(m, AIMessage) and m.tool_calls]
    results = [m for m in messages if isinstance(m, ToolMessage)]
    assert len(calls) == 1 and [c["name"] for c in calls[0].tool_calls] == ["calculator"]
    assert len(results) == 1 and results[0].tool_call_id == calls[0].tool_calls[0]["id"]
    answer = messages[-1]
    assert isinstance(answer, AIMessage) and not answer.tool_calls and answer.content
    return calls[0], results[0], answer


def test_an_agent_on_chatskillgraft_grafts_and_calls_the_tool(memory, store):
    model = ChatSkillGraft(memory=memory, max_tokens=MAX_TOKENS)
    agent = create_agent(model=model, tools=[calculator], middleware=[SkillGraftMiddleware(memory), OneToolRound()])
    call, _, answer = _tool_round(_run(agent))
    for message in (call, answer):
        meta = message.response_metadata["skillgraft"]
        assert meta["decision"] == "graft" and meta["block_name"] == "calculator", meta
    # the tools lead the prompt, the manual's text follows them (a block captured ahead leads only a
    # chat that has no prefix of the app's): placed, not restored
    assert [s["block_name"] for s in call.response_metadata["skillgraft"]["skills"]] == ["calculator"]


def test_an_agent_on_chatopenai_over_the_gateway_grafts_there_and_calls_the_tool(gateway, memory):
    from langchain_openai import ChatOpenAI

    last = max((row["id"] for row in memory.store.ledger(1)), default=0)
    model = ChatOpenAI(base_url=gateway.url + "/v1", api_key="unused", model=MODEL, temperature=0,
                       max_tokens=MAX_TOKENS, max_retries=0, include_response_headers=True)
    middleware = SkillGraftMiddleware(memory, text_recall=False)  # the gateway recalls and grafts itself
    agent = create_agent(model=model, tools=[calculator], middleware=[middleware, OneToolRound()])
    call, _, answer = _tool_round(_run(agent))
    for message in (call, answer):
        meta = message.response_metadata["skillgraft"]
        assert meta["decision"] == "delegated" and meta["block_name"] == "calculator"
        assert meta["served"]["decision"] == "graft" and meta["served"]["block_name"] == "calculator"
        assert meta["served"]["skills"] == "calculator@0"  # the x-skillgraft-skills header: placed at the first turn
    served = [row for row in memory.store.ledger() if row["id"] > last and row["event"] == "generate"]
    assert [row["decision"] for row in served] == ["graft", "graft"]  # both model calls grafted by the gateway


def test_an_agent_on_another_tool_calling_model_gets_the_skills_text(memory):
    script = [AIMessage("", tool_calls=[{"name": "calculator", "args": {"expression": "12*7+5"}, "id": "call_1"}]),
              AIMessage("12 times 7, plus 5, is 89.")]
    model = ScriptedToolModel(messages=iter(script))
    seen = Seen()
    agent = create_agent(model=model, tools=[calculator], middleware=[SkillGraftMiddleware(memory)],
                         system_prompt="You are a terse assistant.")
    messages = agent.invoke({"messages": [HumanMessage(TASK)]}, {"callbacks": [seen]})["messages"]
    call, result, answer = _tool_round(messages)
    assert result.content == "89" and answer.content == "12 times 7, plus 5, is 89."
    for message in (call, answer):
        meta = message.response_metadata["skillgraft"]
        assert (meta["decision"], meta["routed"], meta["block_name"]) == ("text", "graft", "calculator")
    assert len(seen.messages) == 2
    assert all(isinstance(m[0], SystemMessage) and CALCULATOR_MANUAL in m[0].text for m in seen.messages)


def test_chatskillgraft_grafts_with_tools_for_an_agent_whose_model_is_another(memory):
    model = ScriptedToolModel(messages=iter([AIMessage("never asked")]))
    grafting = ChatSkillGraft(memory=memory, max_tokens=MAX_TOKENS)
    agent = create_agent(model=model, tools=[calculator],
                         middleware=[SkillGraftMiddleware(memory, chat_model=grafting), OneToolRound()])
    call, _, answer = _tool_round(_run(agent))
    assert {m.response_metadata["skillgraft"]["decision"] for m in (call, answer)} == {"graft"}
    assert call.response_metadata["model_provider"] == "skillgraft"


def test_a_reply_under_tools_streams_as_it_is_written_on_the_model(client):
    """With tools offered and a question that needs none, the embedded model replies in text
    (it calls no tool unless one is required), and the reply arrives in several pieces."""
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Write one sentence about the sea."}], tools=[CALCULATOR],
        max_tokens=MAX_TOKENS, temperature=0, stream=True)
    chunks = [chunk for chunk in stream if chunk.choices]
    pieces = [c.choices[0].delta.content for c in chunks if c.choices[0].delta.content]
    assert len(pieces) > 1 and not any(c.choices[0].delta.tool_calls for c in chunks)
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
