"""Hostile review of learning from verified answers: worked examples placed beside a skill never
cost the skill its place, and a verified question is no evidence once its solution is gone."""

from __future__ import annotations

from skillgraft import AnswerOptions
from skillgraft.core.placement import EXAMPLES_HEADING
from skillgraft.memory import SkillMemory
from skillgraft.routing.experience import EXPERIENCE
from skillgraft.testing import FakeEmbedder, FakeEngine

OPTIONS = AnswerOptions(max_tokens=512)
APP = "You are a helpful assistant."
SQUASH = "Squash commits: git rebase -i HEAD~3, mark commits as squash, then save."
LEARNED = "combine my three newest commits on the feature branch"
NEAR = "combine my two newest commits on the release branch"


def open_memory(home, n_ctx: int = 4096) -> SkillMemory:
    memory = SkillMemory(home, engine=FakeEngine(n_ctx=n_ctx), embedder=FakeEmbedder())
    memory.add_manual("git-squash", SQUASH, examples=["squash my last commits with git"], capture=False)
    return memory


def test_examples_too_long_for_the_window_are_left_out_not_the_skill(tmp_path):
    with open_memory(tmp_path) as memory:
        # a verified answer as long as a solution block may be: it fits the window on its own
        answer = "git rebase -i HEAD~3 " + "x" * (memory.engine.n_ctx - 600)
        memory.learn(LEARNED, answer, skills=["git-squash"], verifier="exact", expected=answer)
        chat = [("system", APP), ("user", NEAR)]
        plan = memory.plan(chat)
        assert plan.recall.decision == "graft" and plan.recall.examples
        prompt = memory.pipeline().prompt(plan, OPTIONS)
        text = memory.engine.detokenize(list(prompt.tokens))
        assert prompt.grafted, prompt.reason  # the skill stays; the example that does not fit goes
        assert SQUASH in text and EXAMPLES_HEADING not in text
        assert memory.answer(chat, OPTIONS).note.decision == "graft"


def test_a_pruned_or_removed_solution_leaves_no_experience_behind(tmp_path):
    with open_memory(tmp_path) as memory:
        skill = memory.get("git-squash")
        plain = memory.recall(NEAR, log=False).score
        answer = "git rebase -i HEAD~3"
        solution = memory.learn(LEARNED, answer, skills=[skill], verifier="exact", expected=answer)
        memory.store.set_block_expiry(solution, "2001-01-01T00:00:00+00:00")  # expired: pruned below
        assert [r.block_id for r in memory.prune_expired()] == [solution.id]
        assert not [k for k in memory.store.routing_keys() if k["kind"] == EXPERIENCE]
        assert memory.recall(NEAR, log=False).score == plain  # no evidence left for the skill

        other = memory.learn(NEAR, answer, skills=[skill], verifier="exact", expected=answer)
        memory.store.remove(other.id)  # any removal path (a bundle's undo, upkeep) forgets it too
        assert not [k for k in memory.store.routing_keys() if k["kind"] == EXPERIENCE]
