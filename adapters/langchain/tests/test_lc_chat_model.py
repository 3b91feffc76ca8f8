"""ChatSkillGraft on the real embedded model: grafting, usage, stops, streaming, errors."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.tools import tool
from pydantic import BaseModel, Field
from skillgraft.errors import BlockNotFoundError
from skillgraft.core.answer import AnswerOptions
from skillgraft.core.tools import output_format

import lc_store
from langchain_skillgraft import ChatSkillGraft, open_memory

QUESTION = lc_store.GRAFT_QUESTION
FORMAT_TOKENS = 64  # a whole tool call or JSON object


def joined(chunks):
    full = None
    for chunk in chunks:
        full = chunk if full is None else full + chunk
    return full


def test_graft_matches_prefilling_the_block_text(chat, plain, manual):
    grafted = chat.invoke([HumanMessage(QUESTION)], block_id=manual.id)
    prefilled = plain.invoke([SystemMessage(manual.source), HumanMessage(QUESTION)])

    assert grafted.content and grafted.content == prefilled.content  # the graft is exact
    meta = grafted.response_metadata["skillgraft"]
    assert meta["decision"] == "graft" and meta["block_id"] == manual.id and meta["block_name"] == "git-squash"
    assert meta["restored_tokens"] >= manual.n_tokens  # the block, and what the context held after it
    assert meta["confidence"]["mean_logprob"] is not None
    assert prefilled.response_metadata["skillgraft"]["decision"] == "abstain"  # route=False: nothing recalled
    # Only what was not reused is prefilled and counted as input: the same prompt either way.
    plain_meta = prefilled.response_metadata["skillgraft"]
    assert grafted.usage_metadata["input_tokens"] == meta["prefilled_tokens"]
    assert (grafted.usage_metadata["input_tokens"] + meta["restored_tokens"]
            == prefilled.usage_metadata["input_tokens"] + plain_meta["restored_tokens"])
    assert grafted.usage_metadata["total_tokens"] == (
        grafted.usage_metadata["input_tokens"] + grafted.usage_metadata["output_tokens"]
    )


def test_block_by_name_through_bind_and_field(chat, memory, manual):
    bound = chat.bind(block_id="git-squash").invoke(QUESTION)
    fielded = ChatSkillGraft(memory=memory, block_id=manual.id, max_tokens=lc_store.MAX_TOKENS).invoke(QUESTION)
    assert bound.response_metadata["skillgraft"]["block_id"] == manual.id
    assert fielded.content == bound.content


def test_characters_spanning_tokens_come_out_whole(chat):
    text = chat.invoke("Repeat exactly: 🙂🙂🙂", max_tokens=24).content
    assert "\ufffd" not in text
    assert any(ord(c) > 0xFFFF for c in text)  # an emoji: two tokens in SmolLM2's vocabulary


def test_max_tokens_and_finish_reason(chat):
    short = chat.invoke(QUESTION, max_tokens=3)
    assert short.usage_metadata["output_tokens"] == 3
    assert short.response_metadata["finish_reason"] == "length"
    assert chat.invoke("Say hi.", max_tokens=0).content == ""


def test_stream_matches_invoke(chat, manual):
    message = chat.invoke(QUESTION, block_id=manual.id)
    chunks = list(chat.stream(QUESTION, block_id=manual.id))
    full = joined(chunks)
    assert len(chunks) > 2 and full.content == message.content
    assert full.usage_metadata == message.usage_metadata
    assert full.response_metadata["skillgraft"] == message.response_metadata["skillgraft"]
    assert chunks[-1].chunk_position == "last"


@pytest.mark.parametrize("streaming", [False, True])
def test_stop_sequence_cuts_at_the_first_stop(chat, streaming):
    full = chat.invoke(QUESTION).content
    stop = full[6:10]
    assert len(full) > 12 and stop.strip()
    expected = full[: full.find(stop)]
    if streaming:
        message = joined(chat.stream(QUESTION, stop=[stop, "never appears"]))
    else:
        message = chat.invoke(QUESTION, stop=["never appears", stop])
    assert message.content == expected
    assert message.response_metadata["finish_reason"] == "stop"
    with_stop = ChatSkillGraft(memory=chat.memory, stop=[stop], max_tokens=lc_store.MAX_TOKENS)
    assert with_stop.invoke(QUESTION).content == expected


async def test_async_matches_sync(chat, manual):
    message = chat.invoke(QUESTION, block_id=manual.id)
    assert (await chat.ainvoke(QUESTION, block_id=manual.id)).content == message.content
    full = joined([chunk async for chunk in chat.astream(QUESTION, block_id=manual.id)])
    assert full.content == message.content


def test_concurrent_calls_are_serialised(chat, manual):
    expected = chat.invoke(QUESTION, block_id=manual.id).content
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda _: chat.invoke(QUESTION, block_id=manual.id).content, range(3)))
    assert results == [expected] * 3


def test_models_opened_by_folder_share_one_memory(home, memory):
    first, second = ChatSkillGraft(home=str(home)), ChatSkillGraft(home=home / "." )
    assert first.skill_memory is memory and second.skill_memory is memory
    assert first.home == second.home


def test_clear_errors(chat, memory):
    with pytest.raises(TypeError, match="max_token"):
        chat.invoke("hi", max_token=5)
    with pytest.raises(ValueError, match="pinned"):
        chat.invoke("hi", model="gemma3-270m")
    with pytest.raises(ValueError, match="text only"):
        chat.invoke([HumanMessage([{"type": "image", "url": "https://example.com/a.png"}])])
    with pytest.raises(BlockNotFoundError):
        chat.invoke("hi", block_id="no-such-block")
    with pytest.raises(ValueError, match="not the store"):
        ChatSkillGraft(memory=memory, home="/somewhere/else")


def test_a_memory_given_sets_home_and_model(memory):
    model = ChatSkillGraft(memory=memory)
    assert open_memory(model.home, model.model) is memory
    assert model._llm_type == "skillgraft"
    assert model._get_ls_params()["ls_provider"] == "skillgraft"


def test_a_system_message_first_still_grafts(chat, manual):
    grafted = chat.invoke([SystemMessage(lc_store.SYSTEM_PROMPT), HumanMessage(QUESTION)], block_id=manual.id)
    meta = grafted.response_metadata["skillgraft"]
    assert meta["decision"] == "graft" and meta["block_id"] == manual.id and grafted.content
    # The system text leads and the block follows it: placed, at the first user turn.
    assert [(s["block_name"], s["turn"]) for s in meta["skills"]] == [(manual.name, 0)]
    bare = chat.invoke([HumanMessage(QUESTION)], block_id=manual.id)
    assert bare.response_metadata["skillgraft"]["restored_tokens"] >= manual.n_tokens - 1  # the block leads: restored


def test_a_system_message_leads_and_the_block_is_its_own_turn_after_it(chat, plain, manual):
    grafted = chat.invoke([SystemMessage(lc_store.SYSTEM_PROMPT), HumanMessage(QUESTION)], block_id=manual.id)
    prefilled = plain.invoke([SystemMessage(lc_store.SYSTEM_PROMPT), SystemMessage(manual.source), HumanMessage(QUESTION)])
    assert grafted.content == prefilled.content


@pytest.mark.parametrize("question, decision", [
    (QUESTION, "graft"), (lc_store.SOLVED_QUESTION, "exact"), (lc_store.ABSTAIN_QUESTION, "abstain"),
])
def test_a_routed_call_is_the_memorys_own_answer(chat, memory, question, decision):
    message = chat.invoke([SystemMessage(lc_store.SYSTEM_PROMPT), HumanMessage(question)])
    direct = memory.generate(question, system=lc_store.SYSTEM_PROMPT, max_tokens=lc_store.MAX_TOKENS)
    meta = message.response_metadata["skillgraft"]
    assert (meta["decision"], meta["block_id"]) == (direct.decision, direct.block_id) and meta["decision"] == decision
    assert message.content == direct.text


@tool
def run_git(command: str) -> str:
    """Run a git command and return what it prints."""
    return ""


class Command(BaseModel):
    """One git command."""

    command: str = Field(max_length=60, description="the git command to run")


# run_git with its command bounded (as a schema can): SmolLM2-135M otherwise repeats itself inside
# the command until max_tokens, and a call cut short is no call
RUN_GIT = {"type": "function", "function": {
    "name": "run_git", "description": "Run a git command and return what it prints.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string", "maxLength": 40}},
                   "required": ["command"]}}}


def test_bound_tools_give_tool_calls_through_the_pipeline(memory, manual):
    wide = ChatSkillGraft(memory=memory, max_tokens=FORMAT_TOKENS)
    bound = wide.bind_tools([RUN_GIT], tool_choice="any")
    message = bound.invoke(QUESTION)
    meta = message.response_metadata["skillgraft"]
    assert meta["decision"] == "graft" and meta["block_id"] == manual.id
    assert [(s["block_name"], s["turn"]) for s in meta["skills"]] == [(manual.name, 0)]  # after the tools
    assert [call["name"] for call in message.tool_calls] == ["run_git"] and message.tool_calls[0]["id"]
    assert message.response_metadata["finish_reason"] == "tool_calls"
    form = output_format([RUN_GIT], "required")
    direct = memory.answer([("user", QUESTION)], AnswerOptions(max_tokens=FORMAT_TOKENS, format=form))
    assert [(c.name, dict(c.arguments)) for c in direct.tool_calls] == [(c["name"], c["args"]) for c in message.tool_calls]
    streamed = joined(bound.stream(QUESTION))
    assert [(c["name"], c["args"]) for c in streamed.tool_calls] == [(c["name"], c["args"]) for c in message.tool_calls]


def test_structured_output_is_held_to_the_schema(memory):
    wide = ChatSkillGraft(memory=memory, max_tokens=FORMAT_TOKENS)
    for method in ("json_schema", "function_calling"):
        result = wide.with_structured_output(Command, method=method).invoke(QUESTION)
        assert isinstance(result, Command) and result.command
    raw = wide.with_structured_output(Command.model_json_schema(), include_raw=True).invoke(QUESTION)
    assert raw["parsing_error"] is None and set(raw["parsed"]) == {"command"}
    assert raw["raw"].response_metadata["skillgraft"]["decision"] == "graft"


def test_tools_with_a_named_block_go_through_the_pipeline(memory, manual):
    bound = ChatSkillGraft(memory=memory, max_tokens=FORMAT_TOKENS).bind_tools([run_git])
    answer = bound.invoke(QUESTION, block_id=manual.id)
    meta = answer.response_metadata["skillgraft"]
    assert meta["routed"] == "graft" and meta["block_id"] == manual.id
    # a call, a reply, or a call cut by max_tokens: said by finish_reason, never its JSON as text
    assert answer.tool_calls or answer.content or answer.response_metadata["finish_reason"] == "length"
    assert '"tool_calls"' not in answer.content


def test_what_cannot_be_done_with_tools_is_refused(chat, manual):
    with pytest.raises(ValueError, match="tool_choice"):
        chat.bind_tools([run_git], tool_choice="search")
    with pytest.raises(ValueError, match="method"):
        chat.with_structured_output(Command, method="xml")
