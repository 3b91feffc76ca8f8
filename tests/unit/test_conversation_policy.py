"""A later user turn routed to another block: the conversation switches to it (the default), or
under the policy keep holds its block while that block scores above the threshold."""

from __future__ import annotations

import pytest

from skillgraft import AnswerOptions
from skillgraft.errors import InputError
from skillgraft.memory import SkillMemory
from skillgraft.routing.router import THRESHOLD_SETTING
from skillgraft.testing import FakeEmbedder, FakeEngine

from .conftest import GIT_MANUAL, SOURDOUGH_MANUAL

OPTIONS = AnswerOptions(max_tokens=4)
GIT = "how do I squash my last commits with git?"
BREAD = "how long should sourdough bread proof?"


def open_memory(home, **options) -> SkillMemory:
    memory = SkillMemory(home, engine=FakeEngine(), embedder=FakeEmbedder(), **options)
    if not memory.list():
        memory.add_manual("git-squash", GIT_MANUAL, examples=[GIT, "combine commits into one"])
        memory.add_manual("sourdough", SOURDOUGH_MANUAL, examples=[BREAD, "bake sourdough bread"])
    return memory


def conversation(memory):
    chat = [("system", "You are a helpful assistant."), ("user", GIT)]
    first = memory.answer(chat, OPTIONS)
    chat += [("assistant", first.text or "ok"), ("user", BREAD)]
    return first, memory.answer(chat, OPTIONS), chat


def scores(memory, query):
    return dict(memory.route(query).candidates)


def test_a_turn_routed_elsewhere_keeps_the_conversations_block_while_it_scores_above_the_threshold(tmp_path):
    with open_memory(tmp_path / "keep", conversations="keep") as memory:
        git_id = memory.get("git-squash").id
        below = scores(memory, BREAD)[git_id] - 0.01
        memory.store.set_setting(THRESHOLD_SETTING, str(below))  # git still routes above it for the bread turn
        first, second, chat = conversation(memory)
        assert first.note.block_name == "git-squash" and second.note.decision == "graft"
        assert second.note.block_name == "git-squash" and second.note.conversation == "kept"
        assert "sourdough" in second.note.reason and second.note.reused_from == "slot"
        assert second.recall.runner_up == "sourdough"
        later = "and at what temperature?"
        third = memory.answer([*chat, ("assistant", "ok"), ("user", later)], OPTIONS)
        routed = memory.route(later)
        if routed.decision == "graft" and routed.block.name != "git-squash":  # judged by the same rule again
            kept = scores(memory, later).get(git_id, -9) >= below
            assert (third.note.block_name, third.note.conversation) == (
                ("git-squash", "kept") if kept else ("sourdough", "switched"))
    with open_memory(tmp_path / "switch") as memory:  # the default
        memory.store.set_setting(THRESHOLD_SETTING, str(below))
        _, second, _ = conversation(memory)
        assert second.note.block_name == "sourdough" and second.note.conversation == "switched"


def test_the_conversation_switches_when_its_block_no_longer_scores_above_the_threshold(tmp_path):
    with open_memory(tmp_path / "keep", conversations="keep") as memory:
        git_id = memory.get("git-squash").id
        bread = scores(memory, BREAD)
        memory.store.set_setting(THRESHOLD_SETTING, str((bread[git_id] + max(bread.values())) / 2))
        first, second, _ = conversation(memory)
        assert first.note.block_name == "git-squash", "the fake encoder no longer routes the git turn above this threshold"
        assert second.note.block_name == "sourdough" and second.note.conversation == "switched"


def test_a_first_turn_and_a_bad_policy():
    with pytest.raises(InputError, match="conversations"):
        SkillMemory(engine=FakeEngine(), embedder=FakeEmbedder(), conversations="sticky")


def test_a_recall_given_the_earlier_turns_is_the_recall_an_answer_makes(tmp_path):
    for policy, expected in (("keep", ("git-squash", "kept")), ("switch", ("sourdough", "switched"))):
        with open_memory(tmp_path / policy, conversations=policy) as memory:
            memory.store.set_setting(THRESHOLD_SETTING, str(scores(memory, BREAD)[memory.get("git-squash").id] - 0.01))
            _, second, _ = conversation(memory)
            recall = memory.recall(BREAD, earlier=[GIT])
            assert (recall.block.name, recall.conversation) == (second.note.block_name, second.note.conversation) == expected
            assert recall == second.recall
            assert memory.recall(BREAD).block.name == "sourdough" and memory.recall(BREAD).conversation == ""
            with pytest.raises(InputError, match="earlier"):
                memory.recall(BREAD, earlier=GIT)
