"""ChatSkillGraft and the middleware on the fakes of ``skillgraft.testing``: the adapter's fast
tier (no model is loaded; ``make test-fast`` runs it). The real path keeps its tests beside."""

from __future__ import annotations

import sys

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

from langchain_skillgraft import ChatSkillGraft, SkillGraftMiddleware
from skillgraft import AnswerOptions
from skillgraft.core.answer import decision_of
from skillgraft.memory import SkillMemory
from skillgraft.routing.router import THRESHOLD_SETTING
from skillgraft.testing import FakeEmbedder, FakeEngine

MANUAL = "Skill manual: squashing commits with git. Run git rebase -i HEAD~N and mark the others squash."
QUESTION, ANSWER = "What is 17 * 23?", "391"
GRAFT_QUESTION = "how do I squash my last commits?"
BREAD_MANUAL = "Skill manual: baking sourdough bread. Feed the starter, fold, proof overnight and bake covered."
BREAD_QUESTION = "how long should sourdough bread proof?"
HEAVY = ("llama_cpp", "torch", "sentence_transformers", "skillgraft.engine.llama")


@pytest.fixture
def memory(tmp_path):
    with SkillMemory(tmp_path / "store", engine=FakeEngine(), embedder=FakeEmbedder()) as mem:
        mem.add_manual("git-squash", MANUAL, examples=[GRAFT_QUESTION, "combine commits into one"])
        mem.add_solution(QUESTION, ANSWER, method="17 * 23", verifier="exact", expected=ANSWER)
        yield mem


@pytest.fixture(autouse=True)
def _no_model_package():
    before = {m for m in HEAVY if m in sys.modules}
    yield
    assert not [m for m in HEAVY if m in sys.modules and m not in before], "the fast tier loads no model"


def meta(message) -> dict:
    return message.response_metadata["skillgraft"]


def test_a_routed_call_is_the_memorys_answer(memory):
    chat = ChatSkillGraft(memory=memory, max_tokens=8)
    grafted = chat.invoke(GRAFT_QUESTION)
    core = memory.generate(GRAFT_QUESTION, max_tokens=8)
    assert meta(grafted)["decision"] == core.decision == "graft"
    assert grafted.content == core.text and meta(grafted)["block_name"] == "git-squash"
    assert meta(grafted)["restored_tokens"] == meta(grafted)["cache_n"] > 0
    assert grafted.usage_metadata["input_tokens"] == meta(grafted)["prefilled_tokens"]
    exact = chat.invoke(QUESTION)
    assert exact.content == ANSWER and meta(exact)["decision"] == "exact"


def test_a_named_block_is_a_forced_recall_and_route_false_a_forced_abstain(memory):
    block = memory.blocks.get("git-squash")
    forced = ChatSkillGraft(memory=memory, max_tokens=6).invoke("Who won the 1998 world cup?", block_id="git-squash")
    assert meta(forced)["routed"] == "graft" and meta(forced)["block_id"] == block.id
    assert "named by block_id" in meta(forced)["reason"]
    plain = ChatSkillGraft(memory=memory, max_tokens=6, route=False).invoke(GRAFT_QUESTION)
    assert meta(plain)["decision"] == "abstain" and meta(plain)["reused_from"] != "block"
    assert "route=False" in meta(plain)["reason"]
    with pytest.raises(ValueError, match="not both"):
        ChatSkillGraft(memory=memory).invoke(GRAFT_QUESTION, block_id="git-squash", recall=memory.recall(GRAFT_QUESTION))


def test_a_system_message_and_history_still_graft(memory):
    chat = ChatSkillGraft(memory=memory, max_tokens=6)
    history = [SystemMessage("Answer in one line."), HumanMessage("hi"), AIMessage("Hello!"), HumanMessage(GRAFT_QUESTION)]
    answer = chat.invoke(history, block_id="git-squash")
    assert meta(answer)["decision"] == "graft" and 0 < meta(answer)["restored_tokens"] <= memory.blocks.get("git-squash").n_tokens


def test_stream_matches_invoke_and_max_tokens_zero_is_empty(memory):
    chat = ChatSkillGraft(memory=memory, max_tokens=8)
    chunks = list(chat.stream(GRAFT_QUESTION))
    assert "".join(c.content for c in chunks) == chat.invoke(GRAFT_QUESTION).content
    assert meta(chunks[-1])["decision"] == "graft"
    assert chat.invoke(GRAFT_QUESTION, max_tokens=0).content == ""


def test_a_tool_call_cut_by_max_tokens_is_no_call_and_finish_reason_length(memory):
    from langchain_core.tools import tool

    @tool
    def git_log(count: int) -> str:
        """Show the last commits of the repository."""
        return "a1 fix typo"

    call = '{"tool_calls": [{"name": "git_log", "arguments": {"count": 3}}]}'
    memory.engine.reply = lambda prompt: call if "# Tools" in prompt else None
    chat = ChatSkillGraft(memory=memory, max_tokens=len(call) + 1).bind_tools([git_log])
    assert chat.invoke(GRAFT_QUESTION).tool_calls[0]["args"] == {"count": 3}
    cut = chat.invoke(GRAFT_QUESTION, max_tokens=len(call) // 2)
    chunks = list(chat.stream(GRAFT_QUESTION, max_tokens=len(call) // 2))
    streamed = chunks[0]
    for chunk in chunks[1:]:
        streamed += chunk
    for message in (cut, streamed):
        assert message.content == "" and not message.tool_calls and message.response_metadata["finish_reason"] == "length"


def test_clear_errors_on_the_fakes(memory):
    chat = ChatSkillGraft(memory=memory)
    with pytest.raises(TypeError, match="max_token"):
        chat.invoke("hi", max_token=5)
    with pytest.raises(ValueError, match="max_tokens"):
        chat.invoke("hi", max_tokens=-1)
    from skillgraft.errors import BlockNotFoundError, InputError

    with pytest.raises(BlockNotFoundError):
        chat.invoke("hi", block_id="no-such-block")
    with pytest.raises(InputError, match="last message"):
        chat.invoke([HumanMessage("hi"), AIMessage("hello")])


def test_the_middleware_answers_a_recurring_question_from_memory(memory):
    agent = create_agent(model=ChatSkillGraft(memory=memory, max_tokens=8), tools=[],
                         middleware=[SkillGraftMiddleware(memory)])
    answer = agent.invoke({"messages": [HumanMessage(QUESTION)]})["messages"][-1]
    assert answer.content == ANSWER and meta(answer)["decision"] == "exact"


def test_an_agent_loop_with_a_tool_continues_its_prefix_call_after_call(memory):
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import tool

    @tool
    def git_log(count: int) -> str:
        """Show the last commits of the repository."""
        return "a1 fix typo\nb2 fix typo again\nc3 add feature"

    system = SystemMessage("You are a coding agent. " + " ".join(f"Rule {i}: keep every change small." for i in range(30)))
    chat = ChatSkillGraft(memory=memory, max_tokens=8).bind_tools([git_log])
    first = chat.invoke([system, HumanMessage(GRAFT_QUESTION)])
    call = AIMessage("", tool_calls=[{"name": "git_log", "args": {"count": 3}, "id": "call_1"}])
    second = chat.invoke([system, HumanMessage(GRAFT_QUESTION), call, ToolMessage(git_log.invoke({"count": 3}), tool_call_id="call_1")])
    # The loop's second call continues what the context held of the first: the block, the agent's
    # rules, the tools and the question are not prefilled again.
    assert meta(second)["decision"] == meta(first)["decision"] == "graft"
    assert meta(second)["reused_from"] == "slot" and meta(second)["cache_n"] > meta(first)["prefilled_tokens"]
    assert meta(second)["prefill_tokens_avoided"] == meta(second)["cache_n"]
    assert second.usage_metadata["input_tokens"] < meta(second)["cache_n"]


def _agent_reply(agent, messages, stream: bool):
    """The agent's last message: from ``invoke``, or from ``stream`` (the model streams its tokens)."""
    if not stream:
        return agent.invoke({"messages": messages})["messages"][-1]
    state = None
    for mode, part in agent.stream({"messages": messages}, stream_mode=["messages", "values"]):
        state = part if mode == "values" else state
    return state["messages"][-1]


@pytest.mark.parametrize("policy, expected", [("keep", ("sourdough", "entered")), ("switch", ("sourdough", "switched"))])
def test_every_langchain_door_judges_a_conversation_as_the_memory_does(tmp_path, policy, expected):
    with SkillMemory(tmp_path / "store", engine=FakeEngine(), embedder=FakeEmbedder(), conversations=policy) as memory:
        memory.add_manual("git-squash", MANUAL, examples=[GRAFT_QUESTION, "combine commits into one"])
        memory.add_manual("sourdough", BREAD_MANUAL, examples=[BREAD_QUESTION, "bake sourdough bread"])
        git_score = dict(memory.route(BREAD_QUESTION).candidates)[memory.blocks.get("git-squash").id]
        memory.store.set_setting(THRESHOLD_SETTING, str(git_score - 0.01))  # git still scores above it for the bread turn
        chat = [("system", "Answer in one line."), ("user", GRAFT_QUESTION), ("assistant", "Use git rebase -i."),
                ("user", BREAD_QUESTION)]
        direct = memory.answer(chat, AnswerOptions(max_tokens=8))
        assert (direct.note.block_name, direct.note.conversation) == expected
        model = ChatSkillGraft(memory=memory, max_tokens=8)
        history = [HumanMessage(GRAFT_QUESTION), AIMessage("Use git rebase -i."), HumanMessage(BREAD_QUESTION)]
        agent = create_agent(model=model, tools=[], middleware=[SkillGraftMiddleware(memory)],
                             system_prompt="Answer in one line.")
        streamed = None
        for chunk in model.stream([SystemMessage("Answer in one line."), *history]):
            streamed = chunk if streamed is None else streamed + chunk
        replies = {"ChatSkillGraft": model.invoke([SystemMessage("Answer in one line."), *history]),
                   "ChatSkillGraft streamed": streamed,
                   "agent": _agent_reply(agent, history, stream=False),
                   "agent streamed": _agent_reply(agent, history, stream=True)}
        wanted = decision_of(direct.note)
        for door, reply in replies.items():
            assert {key: meta(reply)[key] for key in wanted} == wanted, door
            assert reply.content == direct.text, door
