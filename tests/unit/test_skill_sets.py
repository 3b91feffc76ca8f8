"""The routed set: the skills that go with the routed one, each on its own evidence (at or above
the threshold, within the margin of the best, not vetoed), placed after the app's prefix in one
canonical order; off by default (a set of one)."""

from __future__ import annotations

import pytest

from skillgraft import AnswerOptions
from skillgraft.errors import InputError
from skillgraft.memory import SkillMemory
from skillgraft.routing.skill_sets import DEFAULT_SET_MARGIN, SET_MARGIN_SETTING, SET_SIZE_SETTING, set_rule
from skillgraft.testing import FakeEmbedder, FakeEngine

OPTIONS = AnswerOptions(max_tokens=4)
APP = "You are a helpful assistant."
SQUASH = "Squash commits: git rebase -i HEAD~3, mark commits as squash, then save."
PUSH = "Force-push a rewritten branch: git push --force-with-lease origin branch."
BREAD = "Proof sourdough bread for 4 hours at room temperature."
BOTH = "squash my last git commits and force push the branch"


def open_memory(home, size=None, margin=None) -> SkillMemory:
    memory = SkillMemory(home, engine=FakeEngine(), embedder=FakeEmbedder())
    memory.add_manual("git-squash", SQUASH, examples=["squash my last commits with git", "combine git commits into one"],
                      capture=False)
    memory.add_manual("git-push", PUSH, examples=["push my rewritten git branch", "force push git commits"], capture=False)
    memory.add_manual("sourdough", BREAD, examples=["how long should sourdough bread proof?"], capture=False)
    if size is not None:
        memory.store.set_setting(SET_SIZE_SETTING, str(size))
    if margin is not None:
        memory.store.set_setting(SET_MARGIN_SETTING, str(margin))
    return memory


def names(note) -> list[tuple[str, int]]:
    return [(skill["block_name"], skill["turn"]) for skill in note.skills]


def test_off_by_default_a_question_gets_its_best_block_alone(tmp_path):
    with open_memory(tmp_path) as memory:
        recall = memory.recall(BOTH, log=False)
        assert recall.decision == "graft" and recall.companions == () and [b.name for b in recall.members] == ["git-push"]
        assert names(memory.answer([("system", APP), ("user", BOTH)], OPTIONS).note) == [("git-push", 0)]


def test_a_set_holds_the_near_second_skill_in_one_canonical_order(tmp_path):
    with open_memory(tmp_path, size=3) as memory:
        recall = memory.recall(BOTH, log=False)
        assert recall.block_name == "git-push" and [b.name for b in recall.companions] == ["git-squash"]
        assert recall.as_dict()["companions"] == [{"block_id": recall.companions[0].id, "block_name": "git-squash"}]
        members = sorted([recall.block, *recall.companions], key=lambda b: b.id)
        assert recall.members == tuple(members)
        answer = memory.answer([("system", APP), ("user", BOTH)], OPTIONS)
        assert answer.note.decision == "graft" and sorted(names(answer.note)) == [("git-push", 0), ("git-squash", 0)]
        prompt = memory.pipeline().prompt(memory.plan([("system", APP), ("user", BOTH)]), OPTIONS)
        text = memory.engine.detokenize(list(prompt.tokens))
        assert text.index(APP) < text.index(members[0].source) < text.index(members[1].source) < text.index(BOTH)
        assert prompt.mark and memory.engine.detokenize(list(prompt.tokens[:prompt.mark])).count("Squash commits") == 1


def test_a_companion_below_the_threshold_or_past_the_margin_stays_out(tmp_path):
    with open_memory(tmp_path, size=3, margin=0.0) as memory:
        assert memory.recall(BOTH, log=False).companions == ()
    with open_memory(tmp_path / "one", size=3) as memory:
        recall = memory.recall("squash my last commits with git", log=False)  # push is far behind
        assert recall.block_name == "git-squash" and recall.companions == ()
        assert memory.recall("how long should sourdough proof?", log=False).companions == ()


def test_the_set_enters_a_conversation_once_and_its_members_are_then_kept(tmp_path):
    with open_memory(tmp_path, size=3) as memory:
        chat = [("system", APP), ("user", BOTH)]
        first = memory.answer(chat, OPTIONS)
        chat += [("assistant", first.text or "ok"), ("user", "squash my last commits with git")]
        second = memory.answer(chat, OPTIONS)
        assert second.note.conversation == "kept" and sorted(names(second.note)) == [("git-push", 0), ("git-squash", 0)]
        chat += [("assistant", second.text or "ok"), ("user", "how long should sourdough bread proof?")]
        third = memory.answer(chat, OPTIONS)
        assert third.note.conversation == "entered" and ("sourdough", 2) in names(third.note)


def test_the_same_set_gives_the_same_prompt_whichever_member_routed_first(tmp_path):
    with open_memory(tmp_path, size=3, margin=1.0) as memory:
        a = memory.recall(BOTH, log=False)
        b = memory.recall("squash my last commits with git", log=False)
        assert a.block_name != b.block_name and {x.id for x in a.members} == {x.id for x in b.members}
        assert a.members == b.members


@pytest.mark.parametrize("size, margin", [("0", None), ("9", None), ("two", None), (None, "1.5"), (None, "-0.1")])
def test_settings_out_of_range_are_refused(size, margin):
    settings = {SET_SIZE_SETTING: size, SET_MARGIN_SETTING: margin}
    with pytest.raises(InputError):
        set_rule(settings.get)


def test_the_rule_defaults_to_a_set_of_one():
    assert set_rule({}.get) == (1, DEFAULT_SET_MARGIN)
