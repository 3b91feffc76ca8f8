"""A routed set on the real path: SmolLM2 and the MiniLM encoder, two manuals a question needs
both of; the set is placed after the app's prompt in its canonical order and the note lists both."""

from __future__ import annotations

import pytest

from skillgraft import AnswerOptions
from skillgraft.memory import SkillMemory
from skillgraft.routing.skill_sets import SET_SIZE_SETTING

pytestmark = pytest.mark.model

SQUASH = "Skill manual: squashing commits with git. Run git rebase -i HEAD~3 and mark the later commits squash."
PUSH = "Skill manual: force-pushing a rewritten git branch. Run git push --force-with-lease origin <branch>."
APP = "You are a terse assistant."
BOTH = "How do I squash my last git commits and then force push the rewritten branch?"


def test_a_routed_set_is_placed_and_answered_exactly_on_smollm2(tmp_path, smollm2, embedder):
    with SkillMemory(tmp_path, engine=smollm2, embedder=embedder) as memory:
        memory.add_manual("git-squash", SQUASH, examples=["squash my last commits with git"], capture=False)
        memory.add_manual("git-push", PUSH, examples=["force push my rewritten git branch"], capture=False)
        memory.store.set_setting(SET_SIZE_SETTING, "3")
        chat = [("system", APP), ("user", BOTH)]
        recall = memory.recall(BOTH, log=False)
        assert recall.decision == "graft" and {b.name for b in recall.members} == {"git-squash", "git-push"}, recall.reason
        options = AnswerOptions(max_tokens=8, temperature=0.0)
        answer = memory.answer(chat, options)
        assert answer.note.decision == "graft"
        assert sorted((s["block_name"], s["turn"]) for s in answer.note.skills) == [("git-push", 0), ("git-squash", 0)]
        prompt = memory.pipeline().prompt(memory.plan(chat), options)
        text = smollm2.detokenize(list(prompt.tokens))
        first, second = (b.source for b in recall.members)
        assert text.index(APP) < text.index(first) < text.index(second) < text.index(BOTH)
