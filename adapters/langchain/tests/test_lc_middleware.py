"""create_agent with SkillGraftMiddleware end to end: exact, graft and abstain on the real model."""

from __future__ import annotations

import inspect

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from skillgraft import SkillMemory
from skillgraft.core.chat_layout import continuation
from skillgraft.core.gate import repeats_answer
from skillgraft.core.sampling import SamplingOptions

import lc_store
from langchain_skillgraft import ChatSkillGraft, SkillGraftMiddleware


class ModelCalls(BaseCallbackHandler):
    """Counts chat model runs."""

    def __init__(self) -> None:
        self.count = 0

    def on_chat_model_start(self, *args, **kwargs) -> None:
        self.count += 1


@pytest.fixture(scope="module")
def agent(chat, memory):
    return create_agent(model=chat, tools=[], middleware=[SkillGraftMiddleware(memory)])


async def ask(agent, question: str, asynchronous: bool, history=()):
    calls = ModelCalls()
    state = {"messages": [*history, HumanMessage(question)]}
    config = {"callbacks": [calls]}
    result = await agent.ainvoke(state, config) if asynchronous else agent.invoke(state, config)
    answer = result["messages"][-1]
    assert isinstance(answer, AIMessage)
    return answer, answer.response_metadata["skillgraft"], calls.count


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
async def test_exact_answers_without_calling_the_model(agent, memory, asynchronous):
    answer, meta, model_calls = await ask(agent, "what is 17*23", asynchronous)
    solution = memory.store.solutions_for("what is 17*23")[0]
    assert answer.content == lc_store.SOLVED_ANSWER
    assert meta["decision"] == "exact" and meta["block_id"] == solution.id and meta["score"] == 1.0
    assert meta["verifier"] == "python"
    assert model_calls == 0 and answer.usage_metadata["output_tokens"] == 0


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
async def test_graft_grafts_the_routed_block(agent, chat, manual, asynchronous):
    answer, meta, model_calls = await ask(agent, lc_store.GRAFT_QUESTION, asynchronous)
    assert meta["decision"] == "graft" and meta["block_id"] == manual.id and meta["block_name"] == "git-squash"
    assert meta["score"] >= meta["threshold"] and "git-squash" in meta["reason"]
    assert meta["restored_tokens"] >= manual.n_tokens and model_calls == 1
    assert meta["gate"]["fell_back"] is False and meta["gate"]["confident"]
    assert answer.content == chat.invoke(lc_store.GRAFT_QUESTION, block_id=manual.id).content


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
async def test_abstain_generates_plainly(agent, chat, asynchronous):
    answer, meta, model_calls = await ask(agent, lc_store.ABSTAIN_QUESTION, asynchronous)
    assert meta["decision"] == "abstain" and meta["block_id"] is None
    assert meta["score"] < meta["threshold"] and "out of domain" in meta["reason"]
    assert meta["reused_from"] in ("", "slot") and model_calls == 1  # nothing of a block
    assert answer.content == chat.invoke(lc_store.ABSTAIN_QUESTION).content


async def test_the_latest_user_message_decides(agent):
    history = [HumanMessage(lc_store.ABSTAIN_QUESTION), AIMessage("Paris.")]
    answer, meta, _ = await ask(agent, lc_store.SOLVED_QUESTION, False, history)
    assert meta["decision"] == "exact" and answer.content == lc_store.SOLVED_ANSWER


def test_another_agent_model_gets_exact_answers_and_hands_grafts_over(chat, memory, manual):
    other = GenericFakeChatModel(messages=iter([AIMessage("from the other model")] * 3))
    agent = create_agent(model=other, tools=[], middleware=[SkillGraftMiddleware(memory, chat_model=chat)])
    exact = agent.invoke({"messages": [HumanMessage(lc_store.SOLVED_QUESTION)]})["messages"][-1]
    grafted = agent.invoke({"messages": [HumanMessage(lc_store.GRAFT_QUESTION)]})["messages"][-1]
    plain = agent.invoke({"messages": [HumanMessage(lc_store.ABSTAIN_QUESTION)]})["messages"][-1]
    assert exact.content == lc_store.SOLVED_ANSWER
    assert grafted.response_metadata["skillgraft"]["block_id"] == manual.id
    assert grafted.response_metadata["model_provider"] == "skillgraft"
    assert plain.content == "from the other model"
    assert plain.response_metadata["skillgraft"]["decision"] == "abstain"


class Seen(BaseCallbackHandler):
    """The messages each chat model run was given."""

    def __init__(self) -> None:
        self.messages = []

    def on_chat_model_start(self, serialized, messages, **kwargs) -> None:
        self.messages.append(messages[0])


def test_another_model_gets_the_routed_skills_text(memory, manual):
    other = GenericFakeChatModel(messages=iter([AIMessage("from the other model")] * 2))
    seen = Seen()
    agent = create_agent(model=other, tools=[], middleware=[SkillGraftMiddleware(memory)],
                         system_prompt=lc_store.SYSTEM_PROMPT)
    reply = agent.invoke({"messages": [HumanMessage(lc_store.GRAFT_QUESTION)]}, {"callbacks": [seen]})["messages"][-1]
    meta = reply.response_metadata["skillgraft"]
    assert reply.content == "from the other model"
    assert (meta["decision"], meta["routed"], meta["block_id"]) == ("text", "graft", manual.id)
    assert "text recall" in meta["reason"]
    system = seen.messages[0][0]
    assert isinstance(system, SystemMessage) and system.text.startswith(lc_store.SYSTEM_PROMPT)
    assert manual.source in system.text and "a skill manual (git-squash)" in system.text

    delegated = create_agent(model=other, tools=[], middleware=[SkillGraftMiddleware(memory, text_recall=False)])
    seen = Seen()
    reply = delegated.invoke({"messages": [HumanMessage(lc_store.GRAFT_QUESTION)]}, {"callbacks": [seen]})["messages"][-1]
    assert reply.response_metadata["skillgraft"]["decision"] == "delegated"
    assert all(manual.source not in message.text for message in seen.messages[0])


def test_model_and_middleware_must_share_a_store(memory, tmp_path):
    elsewhere = ChatSkillGraft(home=str(tmp_path / "other-store"))
    agent = create_agent(model=elsewhere, tools=[], middleware=[SkillGraftMiddleware(memory)])
    with pytest.raises(ValueError, match="same memory"):
        agent.invoke({"messages": [HumanMessage(lc_store.GRAFT_QUESTION)]})


async def test_gate_retries_an_unconfident_graft_plainly(chat, memory, manual):
    from skillgraft.core.gate import DEFAULT_GATE_LOGPROB, GATE_SETTING

    agent = create_agent(model=chat, tools=[], middleware=[SkillGraftMiddleware(memory, gate="enforce")])
    confident, meta, calls = await ask(agent, lc_store.GRAFT_QUESTION, False)
    assert meta["decision"] == "graft" and meta["confidence"]["confident"] and calls == 1

    memory.store.set_setting(GATE_SETTING, "0.0")  # no answer is that confident
    try:
        answer, meta, calls = await ask(agent, lc_store.GRAFT_QUESTION, True)
        core = memory.generate(lc_store.GRAFT_QUESTION, max_tokens=lc_store.MAX_TOKENS, gate="enforce")
    finally:
        memory.store.set_setting(GATE_SETTING, repr(DEFAULT_GATE_LOGPROB))
    assert meta["decision"] == "fallback" and meta["block_id"] == manual.id and calls == 1
    assert meta["gate"]["fell_back"] and "not confident" in meta["gate"]["reason"]
    assert answer.content.strip() == core.text and core.decision == "fallback"


def test_the_gate_defaults_as_in_the_core(memory):
    core_default = inspect.signature(SkillMemory.generate).parameters["gate"].default
    assert SkillGraftMiddleware(memory).gate is core_default is None  # the memory's policy
    assert memory.gate == "advisory"
    assert SkillGraftMiddleware(memory, gate="enforce").gate == "enforce"


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
async def test_a_near_miss_never_repeats_the_stored_answer(agent, chat, memory, asynchronous):
    question, solution = lc_store.NEAR_MISS_QUESTION, memory.blocks.get(lc_store.SOLVED_QUESTION)
    # What grafting the solution says, with no rule in the way: 391.
    engine = memory.engine
    keep, after = continuation(engine, solution, [("user", question)])
    engine.graft(memory.store.load_state(solution).state, after, solution.id, keep=keep)
    copied = "".join(step.piece for step in engine.generate(SamplingOptions(lc_store.MAX_TOKENS)))
    assert repeats_answer(copied, lc_store.SOLVED_ANSWER)
    # Naming the block is a forced recall through the pipeline: the near-miss rule still holds.
    forced = chat.invoke(question, block_id=solution.id)
    assert forced.response_metadata["skillgraft"]["decision"] == "fallback"
    assert not repeats_answer(forced.content, lc_store.SOLVED_ANSWER)

    answer, meta, model_calls = await ask(agent, question, asynchronous)
    assert meta["decision"] == "fallback" and meta["block_id"] == solution.id and meta["near_miss"]
    assert meta["gate"]["fell_back"] and meta["gate"]["reason"].startswith("near miss")
    assert not repeats_answer(answer.content, lc_store.SOLVED_ANSWER) and model_calls == 1
    assert answer.content == chat.invoke(question).content
    # The same decision, label and verdict as the core's own dispatch.
    core = memory.generate(question, max_tokens=lc_store.MAX_TOKENS)
    assert (core.decision, core.gate.as_dict(), core.text) == (meta["decision"], meta["gate"], answer.content.strip())


async def test_a_near_miss_falls_back_with_the_gate_off(chat, memory):
    agent = create_agent(model=chat, tools=[], middleware=[SkillGraftMiddleware(memory, gate="advisory")])
    answer, meta, _ = await ask(agent, lc_store.NEAR_MISS_QUESTION, False)
    assert meta["decision"] == "fallback" and meta["gate"]["reason"].startswith("near miss")
    assert not repeats_answer(answer.content, lc_store.SOLVED_ANSWER)


def system_prompt_agent(chat, memory, **options):
    middleware = SkillGraftMiddleware(memory, **options)
    return create_agent(model=chat, tools=[], middleware=[middleware], system_prompt=lc_store.SYSTEM_PROMPT)


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
async def test_a_system_prompt_keeps_the_graft(chat, memory, manual, asynchronous):
    agent = system_prompt_agent(chat, memory, gate=False)
    answer, meta, model_calls = await ask(agent, lc_store.GRAFT_QUESTION, asynchronous)
    assert meta["decision"] == "graft" and meta["block_id"] == manual.id and model_calls == 1
    assert meta["restored_tokens"] > 0  # the block's own system turn, and what the context held after it
    direct = [SystemMessage(lc_store.SYSTEM_PROMPT), HumanMessage(lc_store.GRAFT_QUESTION)]
    assert answer.content == chat.invoke(direct, block_id=manual.id).content


async def test_a_system_prompt_grafts_with_the_default_gate(chat, memory, manual):
    answer, meta, _ = await ask(system_prompt_agent(chat, memory), lc_store.GRAFT_QUESTION, False)
    assert meta["decision"] == "graft" and meta["block_id"] == manual.id
