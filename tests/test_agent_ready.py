"""An agent app's needs: its own system prompt with a graft, near-miss questions."""

from __future__ import annotations

import pytest

from skillgraft import AnswerOptions
from skillgraft.core.chat_layout import chat_tokens
from skillgraft.core.gate import repeats_answer
from skillgraft.core.sampling import SamplingOptions

SYSTEM = "You are a terse assistant."


def test_a_system_prompt_composes_with_a_graft_under_the_default_gate(stocked):
    result = stocked.generate("how do I squash my last commits?", system=SYSTEM, max_tokens=8)
    block = stocked.blocks.get("git-squash")
    assert result.decision == "graft" and result.block_id == block.id, result.gate
    again = stocked.generate("how can I squash my last two commits?", system=SYSTEM, max_tokens=8)
    placed = chat_tokens(stocked.engine, [("system", SYSTEM), ("system", block.source), ("user", "")], stop_at_user=True)
    assert again.block_id == block.id and again.prefill_tokens_avoided >= len(placed)  # the app's prompt and the skill


def test_graft_with_system_prompt_equals_a_fresh_prefill_of_the_same_tokens(stocked):
    engine = stocked.engine
    block = stocked.blocks.get("git-squash")
    messages = [("system", SYSTEM), ("user", "how do I squash my last commits?")]
    grafted = [s.token for s in stocked.answer(messages, AnswerOptions(max_tokens=8), block=block).end.steps]
    # The same as prefilling the chat with the app's system prompt first and the block's text after it.
    engine.prefill(chat_tokens(engine, [messages[0], ("system", block.source), messages[1]]))
    fresh = [s.token for s in engine.generate(SamplingOptions(8))]
    assert grafted == fresh


def test_gemma_glues_the_skill_to_the_apps_system_text(tmp_path, gemma3, embedder):
    from skillgraft.memory import SkillMemory

    with SkillMemory(tmp_path / "g", engine=gemma3, embedder=embedder) as memory:
        block = memory.add_manual("tea", "Skill manual: brewing green tea. Use water at 80 C for two minutes.")
        messages = [("system", SYSTEM), ("user", "how hot should the water be?")]
        grafted = [s.token for s in memory.answer(messages, AnswerOptions(max_tokens=4), block=block).end.steps]
        # Gemma keeps one system turn: the app's text, then the skill's, lead the user turn.
        gemma3.prefill(chat_tokens(gemma3, [("system", f"{SYSTEM}\n\n{block.source}"), messages[1]]))
        assert grafted and grafted == [s.token for s in gemma3.generate(SamplingOptions(4))]


CALCULATOR = {"name": "calculator", "description": "Evaluate arithmetic.",
              "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}}}


@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
def test_a_multi_topic_conversation_with_tools_equals_a_prefill_of_its_placed_tokens(request, tmp_path, embedder, model):
    """Tools first, the first turn's skill after them, a later turn's skill just before that turn:
    the answer is the one a fresh prefill of exactly those tokens gives, on both templates."""
    placed_conversation_is_exact(request.getfixturevalue(model), embedder, tmp_path / model)


def placed_conversation_is_exact(engine, embedder, home) -> None:
    """The check of the test above on ``engine`` (the Qwen tests run it too)."""
    from skillgraft.core.chat_layout import placed_prompt
    from skillgraft.core.tools import output_format
    from skillgraft.memory import SkillMemory

    tools = AnswerOptions(max_tokens=6, format=output_format([CALCULATOR]))
    git = "Skill manual: squashing commits with git. Run git rebase -i HEAD~N and mark the later commits squash."
    tea = "Skill manual: brewing green tea. Use water at 80 C for two minutes, never boiling water."
    with SkillMemory(home, engine=engine, embedder=embedder) as memory:
        memory.add_manual("git-squash", git, examples=["how do I squash my last commits?"], capture=False)
        memory.add_manual("green-tea", tea, examples=["how hot should the water be for green tea?"])
        chat = [("system", SYSTEM), ("user", "how do I squash my last commits?"), ("assistant", "Use git rebase -i."),
                ("user", "how hot should the water be for green tea?")]
        answer = memory.answer(chat, tools)
        assert [(s["block_name"], s["turn"]) for s in answer.note.skills] == [("git-squash", 0), ("green-tea", 1)]
        assert answer.note.conversation == "entered"
        laid = tools.format.lead(chat)
        tokens, _ = placed_prompt(engine, laid, [(0, git), (3, tea)])
        engine.reset()
        engine.prefill(tokens)
        fresh = [s.token for s in engine.generate(tools.sampling(engine.n_ctx - len(tokens)))]
        assert answer.end.prompt_tokens == len(tokens) and [s.token for s in answer.end.steps] == fresh


@pytest.mark.sandbox
def test_a_near_miss_never_repeats_the_stored_answer(memory):
    memory.add_solution("What is 37 * 43?", "1591", method="print(37 * 43)", verifier="python")
    for query in ("What is 37 * 44?", "what is 37*44", "What is 38 * 43?"):
        result = memory.generate(query, max_tokens=24)
        assert result.decision != "exact"
        assert not repeats_answer(result.text, "1591"), (query, result.text)
        assert result.recall.decision == "graft" and result.recall.near_miss, (query, result.recall.reason)
        assert "near miss" in result.recall.reason
