"""Where skills sit: after the app's system turns and tools, and in a conversation where they
entered. Under the policy keep (the default) the skills already in a conversation stay and a
skill a later turn needs enters after the turns so far; under switch each turn is answered
behind its own block, in front of the conversation."""

from __future__ import annotations

import pytest

from skillgraft import AnswerOptions
from skillgraft.core.chat_layout import chat_tokens
from skillgraft.core.tools import output_format
from skillgraft.errors import InputError
from skillgraft.memory import SkillMemory
from skillgraft.testing import FakeEmbedder, FakeEngine

from .conftest import GIT_MANUAL, OUT_OF_DOMAIN, SOURDOUGH_MANUAL

OPTIONS = AnswerOptions(max_tokens=4)
APP = "You are a helpful assistant."
GIT = "how do I squash my last commits with git?"
BREAD = "how long should sourdough bread proof?"
CALCULATOR = {"name": "calculator", "description": "Evaluate arithmetic.",
              "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}}}


def open_memory(home, **options) -> SkillMemory:
    memory = SkillMemory(home, engine=FakeEngine(), embedder=FakeEmbedder(), **options)
    if not memory.blocks.list():
        memory.add_manual("git-squash", GIT_MANUAL, examples=[GIT, "combine commits into one"])
        memory.add_manual("sourdough", SOURDOUGH_MANUAL, examples=[BREAD, "bake sourdough bread"])
    return memory


def conversation(memory, app=APP):
    chat = [("system", app), ("user", GIT)] if app else [("user", GIT)]
    first = memory.answer(chat, OPTIONS)
    chat += [("assistant", first.text or "ok"), ("user", BREAD)]
    return first, memory.answer(chat, OPTIONS), chat


def places(note) -> list[tuple[str, int]]:
    return [(skill["block_name"], skill["turn"]) for skill in note.skills]


def test_a_skill_a_later_turn_needs_enters_after_the_turns_so_far(tmp_path):
    with open_memory(tmp_path / "keep") as memory:  # keep is the default
        first, second, chat = conversation(memory)
        assert (first.note.block_name, first.note.conversation, places(first.note)) == ("git-squash", "", [("git-squash", 0)])
        assert (second.note.decision, second.note.block_name, second.note.conversation) == ("graft", "sourdough", "entered")
        assert places(second.note) == [("git-squash", 0), ("sourdough", 1)] and "user turn 2" in second.note.reason
        laid = [("system", APP), ("system", GIT_MANUAL), ("user", GIT), chat[2], ("system", SOURDOUGH_MANUAL), ("user", BREAD)]
        assert second.end.prompt_tokens == len(chat_tokens(memory.engine, laid))
        # nothing the first turn computed is computed again: the slot's cells lead the new prompt
        assert second.note.reused_from == "slot" and second.note.cache_n >= first.end.prompt_tokens
        plain = memory.answer(laid, OPTIONS, route=False)  # exact: the same tokens prefilled plainly
        assert [s.token for s in plain.end.steps] == [s.token for s in second.end.steps]


def test_a_skill_the_conversation_holds_keeps_its_place_and_a_turn_that_needs_none_adds_none(tmp_path):
    with open_memory(tmp_path / "keep") as memory:
        _, second, chat = conversation(memory)
        chat += [("assistant", second.text or "ok"), ("user", "and how do I push the squashed commits with git?")]
        third = memory.answer(chat, OPTIONS)
        assert (third.note.block_name, third.note.conversation) == ("git-squash", "kept")
        assert places(third.note) == [("git-squash", 0), ("sourdough", 1)] and third.note.reused_from == "slot"
        chat += [("assistant", third.text or "ok"), ("user", OUT_OF_DOMAIN)]
        fourth = memory.answer(chat, OPTIONS)
        assert fourth.note.decision == "abstain" and places(fourth.note) == places(third.note)
        assert fourth.note.cache_n >= third.end.prompt_tokens  # the skills stay in the prompt: its cells too


def test_under_switch_each_turn_is_answered_behind_its_own_block(tmp_path):
    with open_memory(tmp_path / "switch", conversations="switch") as memory:
        _, second, _ = conversation(memory)
        assert (second.note.block_name, second.note.conversation) == ("sourdough", "switched")
        assert places(second.note) == [("sourdough", 0)]


def test_a_bad_policy_is_refused():
    with pytest.raises(InputError, match="conversations"):
        SkillMemory(engine=FakeEngine(), embedder=FakeEmbedder(), conversations="sticky")


def test_a_recall_given_the_earlier_turns_is_the_recall_an_answer_makes(tmp_path):
    for policy, expected in (("keep", ("sourdough", "entered")), ("switch", ("sourdough", "switched"))):
        with open_memory(tmp_path / policy, conversations=policy) as memory:
            _, second, _ = conversation(memory)
            recall = memory.recall(BREAD, earlier=[GIT])
            assert (recall.block.name, recall.conversation) == (second.note.block_name, second.note.conversation) == expected
            assert recall == second.recall
            assert memory.recall(BREAD).block.name == "sourdough" and memory.recall(BREAD).conversation == ""
            with pytest.raises(InputError, match="earlier"):
                memory.recall(BREAD, earlier=GIT)


def test_tools_are_part_of_the_apps_prefix_and_every_skill_follows_them(tmp_path):
    tools = AnswerOptions(max_tokens=8, format=output_format([CALCULATOR]))
    with open_memory(tmp_path / "tools") as memory:
        prefix = f"{APP}\n\n{tools.format.instructions()}"
        first = memory.answer([("system", APP), ("user", GIT)], tools)
        laid = [("system", prefix), ("system", GIT_MANUAL), ("user", GIT)]
        assert first.note.block_name == "git-squash" and first.end.prompt_tokens == len(chat_tokens(memory.engine, laid))
        second = memory.answer([("system", APP), ("user", BREAD)], tools)  # another skill behind the same agent
        app = chat_tokens(memory.engine, [("system", prefix), ("user", "")], stop_at_user=True)
        opening = chat_tokens(memory.engine, [("system", prefix)], add_generation_prompt=False)
        assert second.note.block_name == "sourdough" and second.note.cache_n >= len(opening)
        assert app[: len(opening)] == opening


def test_a_block_captured_ahead_leads_only_a_chat_where_it_is_the_prefix(tmp_path):
    with open_memory(tmp_path / "ahead") as memory:
        block = memory.blocks.get("git-squash")
        alone = memory.answer([("user", GIT)], OPTIONS)  # no system turns: the block is the prefix, restored
        assert alone.note.decision == "graft" and alone.note.reused_from == "block" and alone.note.cache_n > 0
        behind = memory.answer([("system", APP), ("user", GIT)], OPTIONS)  # the app's prompt first, the manual after
        laid = [("system", APP), ("system", block.source), ("user", GIT)]
        assert behind.note.decision == "graft" and behind.end.prompt_tokens == len(chat_tokens(memory.engine, laid))


def test_a_skill_that_leaves_no_room_stays_out_and_the_skills_already_in_stay(tmp_path):
    app, later = [("system", APP)], [("assistant", "ok"), ("user", "and how do I push the squashed commits with git?")]
    turns = [("user", GIT), ("assistant", "ok"), ("user", BREAD)]
    engine = FakeEngine()
    with_git = len(chat_tokens(engine, [*app, ("system", GIT_MANUAL), *turns]))
    with_both = len(chat_tokens(engine, [*app, ("system", GIT_MANUAL), *turns[:2], ("system", SOURDOUGH_MANUAL), turns[2]]))
    third_with_git = len(chat_tokens(engine, [*app, ("system", GIT_MANUAL), *turns, *later]))
    options = AnswerOptions(max_tokens=140)
    n_ctx = third_with_git + options.max_tokens  # the reply's room is a quarter of it: every turn fits with
    assert with_both + n_ctx // 4 > n_ctx >= third_with_git + n_ctx // 4  # git-squash, not with sourdough too
    memory = SkillMemory(tmp_path / "narrow", engine=FakeEngine(n_ctx=n_ctx), embedder=FakeEmbedder())
    with memory:
        memory.add_manual("git-squash", GIT_MANUAL, examples=[GIT, "combine commits into one"])
        memory.add_manual("sourdough", SOURDOUGH_MANUAL, examples=[BREAD, "bake sourdough bread"])
        first = memory.answer([*app, turns[0]], options)
        second = memory.answer([*app, *turns], options)
        assert (second.note.decision, second.note.block_name) == ("fallback", "sourdough")
        assert places(second.note) == [("git-squash", 0)] and "sourdough" in second.note.reason
        assert second.end.prompt_tokens == with_git  # git-squash stays where it entered: nothing is computed again
        assert second.note.reused_from == "slot" and second.note.cache_n >= first.end.prompt_tokens - 8
        third = memory.answer([*app, *turns, *later], options)  # back to git: the skill it holds, grafted
        assert (third.note.decision, third.note.block_name, third.note.conversation) == ("graft", "git-squash", "kept")
        assert places(third.note) == [("git-squash", 0)] and third.end.prompt_tokens == third_with_git
        assert third.note.cache_n >= with_git - 8
