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
    block = stocked.get("git-squash")
    assert result.decision == "graft" and result.block_id == block.id, result.gate
    system_turn = stocked.engine.tokenize(stocked.engine.chat_prompt([("system", block.source)], add_generation_prompt=False))
    assert result.prefill_tokens_avoided == len(system_turn) < block.n_tokens


def test_graft_with_system_prompt_equals_a_fresh_prefill_of_the_same_tokens(stocked):
    engine = stocked.engine
    block = stocked.get("git-squash")
    messages = [("system", SYSTEM), ("user", "how do I squash my last commits?")]
    grafted = [s.token for s in stocked.answer(messages, AnswerOptions(max_tokens=8), block=block).end.steps]
    # The same as prefilling the chat with the block and the app's system prompt as two system turns.
    engine.prefill(chat_tokens(engine, [("system", block.source), *messages]))
    fresh = [s.token for s in engine.generate(SamplingOptions(8))]
    assert grafted == fresh


def test_gemma_folds_the_app_system_turn_after_the_block(tmp_path, gemma3, embedder):
    from skillgraft.memory import SkillMemory

    with SkillMemory(tmp_path / "g", engine=gemma3, embedder=embedder) as memory:
        block = memory.add_manual("tea", "Skill manual: brewing green tea. Use water at 80 C for two minutes.")
        messages = [("system", SYSTEM), ("user", "how hot should the water be?")]
        grafted = [s.token for s in memory.answer(messages, AnswerOptions(max_tokens=4), block=block).end.steps]
        # Gemma keeps one system turn: the app's text leads the user turn after the whole block.
        folded = chat_tokens(gemma3, [("system", block.source), ("user", f"{SYSTEM}\n\nhow hot should the water be?")])
        assert tuple(folded[: block.n_tokens]) == block.tokens
        gemma3.prefill(folded)
        assert grafted and grafted == [s.token for s in gemma3.generate(SamplingOptions(4))]


@pytest.mark.sandbox
def test_a_near_miss_never_repeats_the_stored_answer(memory):
    memory.add_solution("What is 37 * 43?", "1591", method="print(37 * 43)", verifier="python")
    for query in ("What is 37 * 44?", "what is 37*44", "What is 38 * 43?"):
        result = memory.generate(query, max_tokens=24)
        assert result.decision != "exact"
        assert not repeats_answer(result.text, "1591"), (query, result.text)
        assert result.recall.decision == "graft" and result.recall.near_miss, (query, result.recall.reason)
        assert "near miss" in result.recall.reason
