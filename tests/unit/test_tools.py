"""Tools and structured output on the fakes: the format, the chat with tool turns, and the
gateway's OpenAI wire format (tool calls, JSON, ``n``) over the one answer pipeline."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from skillgraft.core.answer import AnswerOptions, check_chat
from skillgraft.core.tools import OutputFormat, Tool, output_format, tool_calls_turn, tool_result_turn
from skillgraft.errors import FormatError, InputError
from skillgraft.gateway.app import create_app
from skillgraft.gateway.service import Gateway
from skillgraft.testing import FakePool
from tests.conftest import doc_block

from .conftest import GIT_QUERY, OUT_OF_DOMAIN, QUESTION

CALCULATOR = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
}}
CALL = '{"tool_calls": [{"name": "calculator", "arguments": {"expression": "12*7"}}]}'
SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
NESTED: dict = {"type": "string"}
for _ in range(400):  # deeper than json.dumps or the converter would recurse safely
    NESTED = {"type": "object", "properties": {"a": NESTED}}


# -- the format -------------------------------------------------------------------------------


def test_tools_make_one_grammar_of_calls_or_a_reply():
    form = output_format([CALCULATOR])
    assert form.tools == (Tool.from_openai(CALCULATOR),) and form.tool_choice == "auto" and not form.parallel
    assert "tool-calls" in form.grammar and "plain-reply" in form.grammar and '\\"calculator\\"' in form.grammar
    assert "plain-reply" not in output_format([CALCULATOR], "required").grammar  # a call must be made
    assert not form.demands_structure  # a verified answer may stand as plain text
    assert output_format([CALCULATOR], "required").demands_structure
    assert output_format([CALCULATOR], {"type": "function", "function": {"name": "calculator"}}).tool_choice == "calculator"
    assert output_format([CALCULATOR], "none") is None and output_format() is None
    assert output_format(response_format={"type": "text"}) is None
    assert output_format([CALCULATOR, CALCULATOR]).tools == (Tool.from_openai(CALCULATOR),)  # the same tool twice


def test_an_answer_is_read_as_tool_calls_or_a_reply():
    form = output_format([CALCULATOR])
    parsed = form.parse(CALL)
    assert parsed.content == "" and [(c.name, dict(c.arguments)) for c in parsed.tool_calls] == [("calculator", {"expression": "12*7"})]
    assert parsed.tool_calls[0].id.startswith("call_")
    assert json.loads(parsed.tool_calls[0].as_openai()["function"]["arguments"]) == {"expression": "12*7"}
    assert form.parse("It is 84.").content == "It is 84."  # a reply is plain text
    assert form.parse("84, {not a call}").content == "84, {not a call}"


@pytest.mark.parametrize("cut, content", [
    ('{"tool_calls": [{"name": "calc', ""),
    (CALL[:-2], ""),  # every call whole, the envelope not: still cut, no call is made
    ('{"tool', ""),
    ("{", ""),
    ("It is 8", "It is 8"),  # a reply cut short is its text so far
])
def test_a_call_cut_short_is_never_a_call_or_its_json(cut, content):
    parsed = output_format([CALCULATOR]).parse(cut)
    assert (parsed.content, parsed.tool_calls) == (content, ())
    json_form = output_format(response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": SCHEMA}})
    assert json_form.parse('{"answer": 391}').content == '{"answer": 391}' and json_form.demands_structure


@pytest.mark.parametrize("arguments, field", [
    (dict(tool_choice="required"), "tool_choice"),
    (dict(tools=[CALCULATOR], tool_choice="search"), "tool_choice"),
    (dict(tools=[CALCULATOR], tool_choice=3), "tool_choice"),
    (dict(tools=[{"type": "retrieval"}]), "tools"),
    (dict(tools=[{"type": "function", "function": {"name": "bad name!"}}]), "tools"),
    (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}]), "tools"),
    (dict(tools=[CALCULATOR], response_format={"type": "json_object"}), "response_format"),
    (dict(response_format={"type": "yaml"}), "response_format"),
    (dict(response_format={"type": "json_schema", "json_schema": {"name": "x"}}), "response_format"),
    (dict(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/nowhere"}}}), "response_format"),
    (dict(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"enum": ["a" * 70_000]}}}), "response_format"),
    (dict(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": NESTED}}), "response_format"),
    (dict(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "array", "items": {"type": "string"}, "minItems": 10**9}}}), "response_format"),
    (dict(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"}}}),
     "response_format"),
])
def test_what_cannot_be_honoured_is_a_format_error_naming_the_field(arguments, field):
    with pytest.raises(FormatError) as raised:
        output_format(**arguments)
    assert raised.value.field == field and isinstance(raised.value, InputError)


def test_a_format_ends_the_apps_system_prompt_so_skills_come_after_it():
    form = output_format([CALCULATOR])
    turns = [("user", "hi"), ("assistant", "hello"), ("user", "12*7?")]
    chat = form.lead([("system", "Be terse."), ("system", "Cite sources."), *turns])
    assert chat[0] == ("system", "Be terse.") and chat[2:] == turns
    assert chat[1][1].startswith("Cite sources.\n\n# Tools\n")
    alone = form.lead(turns)  # no system prompt: the tools are one in front
    assert alone[0] == ("system", form.instructions()) and alone[1:] == turns
    assert OutputFormat(schema={"type": "object"}).instructions() == "Reply with a JSON object only."


def test_tool_turns_render_as_user_turns_and_are_never_the_query():
    call = tool_calls_turn([("calculator", {"expression": "12*7"})])
    assert json.loads(call) == json.loads(CALL)
    chat, query = check_chat([
        ("user", "What is 12 times 7?"), ("assistant", call),
        ("tool", tool_result_turn("calculator", "84")), ("tool", tool_result_turn("calculator", "85")),
    ])
    assert query == "What is 12 times 7?"
    assert chat[-1] == ("user", "Tool calculator returned: 84\nTool calculator returned: 85")
    with pytest.raises(InputError, match="no user message"):
        check_chat([("tool", "Tool x returned: 1")])
    with pytest.raises(InputError, match="last message"):
        check_chat([("user", "hi"), ("assistant", call)])


# -- through the memory and the gateway ----------------------------------------------------------


def replies(prompt: str):
    if "# Tools" in prompt:
        return "It is 84." if "returned: 84" in prompt else CALL
    if "JSON" in prompt:
        return '{"answer": 391}'
    return "Run git rebase -i and squash." if "squashing commits" in prompt else "I can help with that."


TOOL_ROUND = "### A tool's result, fed back"
MULTIPLY_CALL = '{"tool_calls": [{"name": "multiply", "arguments": {"a": 12, "b": 7}}]}'


def test_a_tool_result_is_fed_back_in_process_as_the_api_page_shows(fake_stocked, fake_engine):
    prompts = []

    def reply(prompt: str):
        prompts.append(prompt)
        if "Tool multiply returned: 84" in prompt:
            return "12 times 7 is 84."
        return MULTIPLY_CALL if "# Tools" in prompt else None

    fake_engine.reply = reply
    scope = {"memory": fake_stocked}
    exec(compile(doc_block("api.md", TOOL_ROUND), "docs/api.md", "exec"), scope)
    chat, answer = scope["chat"], scope["answer"]
    assert chat[1:] == [("assistant", MULTIPLY_CALL), ("tool", "Tool multiply returned: 84")]
    assert answer.text == "12 times 7 is 84." and not answer.tool_calls and answer.end.finish_reason == "stop"
    assert len(prompts) == 2 and MULTIPLY_CALL in prompts[1] and "# Tools" not in prompts[1]
    assert prompts[1].rstrip().endswith("Tool multiply returned: 84<|im_end|>\n<|im_start|>assistant")


@pytest.fixture
def client(fake_stocked, fake_engine, fake_embedder):
    fake_engine.reply = replies
    gateway = Gateway(fake_stocked.store.home, FakePool(fake_engine), embedder=fake_embedder)
    with TestClient(create_app(gateway), base_url="http://127.0.0.1") as http:
        yield http
    gateway.close()


def _post(http, messages, **extra):
    body = {"model": "fake-chatml", "messages": messages, **extra}
    return http.post("/v1/chat/completions", json=body)


def test_a_graft_with_tools_answers_with_a_tool_call_and_then_with_its_result(client, fake_stocked):
    first = _post(client, [{"role": "user", "content": GIT_QUERY}], tools=[CALCULATOR])
    assert first.status_code == 200, first.text
    body = first.json()
    choice = body["choices"][0]
    assert body["skillgraft"]["decision"] == "graft" and choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    call = choice["message"]["tool_calls"][0]
    assert call["type"] == "function" and call["function"]["name"] == "calculator"
    assert json.loads(call["function"]["arguments"]) == {"expression": "12*7"}
    messages = [{"role": "user", "content": GIT_QUERY}, choice["message"],
                {"role": "tool", "tool_call_id": call["id"], "content": "84"}]
    second = _post(client, messages, tools=[CALCULATOR]).json()
    assert second["skillgraft"]["decision"] == "graft"
    assert second["choices"][0]["message"] == {"role": "assistant", "content": "It is 84."}
    direct = fake_stocked.answer([("user", GIT_QUERY)], AnswerOptions(format=output_format([CALCULATOR])))
    assert [(c.name, dict(c.arguments)) for c in direct.tool_calls] == [("calculator", {"expression": "12*7"})]


def test_tool_calls_stream_in_the_openai_shape(client):
    with client.stream("POST", "/v1/chat/completions", json={
        "model": "fake-chatml", "stream": True, "tools": [CALCULATOR], "messages": [{"role": "user", "content": OUT_OF_DOMAIN}],
    }) as response:
        assert response.status_code == 200
        chunks = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    calls = [call for delta in deltas for call in delta.get("tool_calls") or ()]
    assert [(c["index"], c["function"]["name"]) for c in calls] == [(0, "calculator")]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls" and chunks[0]["skillgraft"]["decision"] == "abstain"


def test_a_reply_under_tools_streams_as_it_is_written(fake_stocked):
    """A reply is text from its first character, so it streams token by token (a call is held)."""
    fake_stocked.engine.reply = "It is 84, with tools offered."
    events = list(fake_stocked.stream([("user", OUT_OF_DOMAIN)], AnswerOptions(format=output_format([CALCULATOR]))))
    deltas = [event for event in events if isinstance(event, str)]
    assert len(deltas) > 5 and "".join(deltas) == "It is 84, with tools offered."


def test_a_tool_call_cut_by_max_tokens_is_no_call_and_finish_reason_length_through_every_door(client, fake_stocked):
    cut_at = len(CALL) // 2  # one token a byte: the call is cut inside its arguments
    direct = fake_stocked.answer([("user", OUT_OF_DOMAIN)], AnswerOptions(max_tokens=cut_at, format=output_format([CALCULATOR])))
    assert (direct.text, direct.tool_calls, direct.end.finish_reason) == ("", (), "length")
    assert direct.end.completion_tokens == cut_at
    request = {"messages": [{"role": "user", "content": OUT_OF_DOMAIN}], "tools": [CALCULATOR], "max_tokens": cut_at}
    choice = _post(client, **request).json()["choices"][0]
    assert choice["finish_reason"] == "length" and choice["message"] == {"role": "assistant", "content": ""}
    with client.stream("POST", "/v1/chat/completions", json={"model": "fake-chatml", "stream": True, **request}) as response:
        chunks = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert not any(d.get("content") or d.get("tool_calls") for d in deltas)
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"
    whole = _post(client, **{**request, "max_tokens": len(CALL) + 1}).json()["choices"][0]
    assert whole["finish_reason"] == "tool_calls" and whole["message"]["tool_calls"]


def test_a_reply_cut_by_max_tokens_is_its_text_so_far(client):
    call = {"id": "call_1", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "12*7"}'}}
    messages = [{"role": "user", "content": OUT_OF_DOMAIN}, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "content": "84"}]
    choice = _post(client, messages, tools=[CALCULATOR], max_tokens=len("It is")).json()["choices"][0]
    assert choice["finish_reason"] == "length" and choice["message"]["content"] == "It is"


def test_an_exact_question_with_tools_is_the_verified_answer_unless_a_call_is_demanded(client):
    exact = _post(client, [{"role": "user", "content": QUESTION}], tools=[CALCULATOR]).json()
    assert exact["skillgraft"]["decision"] == "exact" and exact["choices"][0]["message"]["content"] == "391"
    assert exact["choices"][0]["finish_reason"] == "stop"
    demanded = _post(client, [{"role": "user", "content": QUESTION}], tools=[CALCULATOR], tool_choice="required").json()
    assert demanded["skillgraft"]["decision"] == "graft" and demanded["skillgraft"]["routed"] == "graft"
    assert "the answer must be a tool call" in demanded["skillgraft"]["reason"]
    assert demanded["choices"][0]["message"]["tool_calls"]


def test_json_schema_output_and_several_choices(client):
    form = {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}}
    body = _post(client, [{"role": "user", "content": QUESTION}], response_format=form, n=2, max_tokens=32).json()
    assert [json.loads(c["message"]["content"]) for c in body["choices"]] == [{"answer": 391}] * 2
    assert [c["index"] for c in body["choices"]] == [0, 1]
    assert all(c["skillgraft"]["decision"] == "graft" for c in body["choices"])  # JSON: the solution is grafted
    assert body["usage"]["completion_tokens"] == 2 * len('{"answer": 391}')  # one token a byte, twice
    with client.stream("POST", "/v1/chat/completions", json={
        "model": "fake-chatml", "stream": True, "n": 2, "messages": [{"role": "user", "content": QUESTION}],
    }) as response:
        chunks = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    texts = {}
    for chunk in chunks:
        for choice in chunk["choices"]:
            texts[choice["index"]] = texts.get(choice["index"], "") + (choice["delta"].get("content") or "")
    assert texts == {0: "391", 1: "391"}


@pytest.mark.parametrize("extra, param", [
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [CALCULATOR], "tool_choice": {"type": "function", "function": {"name": "search"}}}, "tool_choice"),
    ({"tools": [CALCULATOR], "response_format": {"type": "json_object"}}, "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/x"}}}}, "response_format"),
    ({"tools": [{"type": "function", "function": {"name": "f g"}}]}, "tools.0.function.name"),
    ({"n": 9}, "n"),
    ({"functions": [{"name": "f"}]}, "functions"),
])
def test_what_the_gateway_cannot_do_is_a_400_naming_the_field(client, extra, param):
    response = _post(client, [{"role": "user", "content": GIT_QUERY}], **extra)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


def test_a_tool_result_must_answer_an_earlier_call(client):
    messages = [{"role": "user", "content": GIT_QUERY}, {"role": "tool", "tool_call_id": "call_nowhere", "content": "84"}]
    response = _post(client, messages, tools=[CALCULATOR])
    assert response.status_code == 400 and response.json()["error"]["param"] == "messages.1.tool_call_id"
    bad_arguments = [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": "[1"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "1"}]
    response = _post(client, bad_arguments, tools=[CALCULATOR])
    assert response.status_code == 400 and response.json()["error"]["param"] == "messages.1.tool_calls"


@pytest.mark.parametrize("depth", [500, 5000])
def test_a_hostile_deep_schema_is_a_400_not_a_crash(client, depth):
    parameters = '{"a": ' * depth + "1" + "}" * depth
    body = ('{"model": "fake-chatml", "messages": [{"role": "user", "content": "hi"}], '
            '"tools": [{"type": "function", "function": {"name": "f", "parameters": ' + parameters + "}}]}")
    response = client.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error"
