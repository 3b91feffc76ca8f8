"""On the embedded model: a chat whose first system message is a manual's text reuses the
manual's captured block, found by key with no routing, and answers exactly as a prefill of the
whole prompt does — the block's cells whole, or cut to what a prompt shares with them."""

from __future__ import annotations

from skillgraft import AnswerOptions
from skillgraft.memory import SkillMemory
from skillgraft.testing import FakeEmbedder

from .conftest import GIT_MANUAL

MANUAL = (GIT_MANUAL + " To squash the last three commits run git rebase -i HEAD~3 and mark two of them as squash."
          " Edit the combined message when the editor opens. To undo a squash, find the old head with git reflog.")
QUESTION = "How do I squash my last three commits into one?"
OPTIONS = AnswerOptions(max_tokens=12)


def steps_of(answer) -> list[tuple[int, float]]:
    return [(step.token, step.logprob) for step in answer.end.steps]


def plain_answer(tmp_path, engine, messages):
    """The chat prefilled whole: no block, no derived state, nothing held."""
    engine.reset()
    with SkillMemory(tmp_path / "plain", engine=engine, embedder=FakeEmbedder(), derived_bytes=0) as plain:
        answer = plain.answer(messages, OPTIONS, route=False)
    assert (answer.note.reused_from, answer.note.cache_n) == ("", 0)
    return answer


def test_a_chat_opening_with_a_manual_reuses_its_block_by_key_and_answers_as_a_prefill(tmp_path, smollm2):
    home = tmp_path / "store"
    with SkillMemory(home, engine=smollm2, embedder=FakeEmbedder()) as memory:
        block = memory.add_manual("git-squash", MANUAL, examples=["how do I squash my last commits?"])
    whole = [("system", MANUAL), ("user", QUESTION)]
    cut = [("system", MANUAL.rsplit(".", 2)[0] + ". Answer in French."), ("user", QUESTION)]
    smollm2.reset()  # the capture left the block's cells in the context
    with SkillMemory(home, engine=smollm2, embedder=FakeEmbedder()) as memory:
        found = memory.answer(whole, OPTIONS, route=False)
        assert found.note.decision == "abstain" and found.note.block_id is None  # nothing routed
        assert (found.note.reused_from, found.note.cache_n) == ("derived", block.n_tokens)
        assert smollm2.context.reused_cells == block.n_tokens and len(memory.states.cache.store) == 0  # the block's own
        smollm2.reset()
        shared = memory.answer(cut, OPTIONS, route=False)
        assert shared.note.reused_from == "derived" and 64 <= shared.note.cache_n < block.n_tokens
    assert steps_of(found) == steps_of(plain_answer(tmp_path, smollm2, whole)) and found.text
    assert steps_of(shared) == steps_of(plain_answer(tmp_path, smollm2, cut))
