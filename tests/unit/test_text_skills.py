"""An imported skill's part is text: placed after the app's own system turns, its cells made
on first use, kept as a prefix state and restored next time; never a failed chat."""

from __future__ import annotations

from skillgraft import AnswerOptions
from skillgraft.core.chat_layout import chat_tokens, skill_prompt
from skillgraft.memory import SkillMemory
from skillgraft.testing import FakeEmbedder, FakeEngine

from .skill_folders import pdf_skill

APP = "You are a coding agent working in the user's repository. Answer briefly and precisely. " * 2
QUESTION = "merge pdf files with PdfWriter"
OPTIONS = AnswerOptions(max_tokens=8)


def _skill_memory(tmp_path, engine=None) -> SkillMemory:
    memory = SkillMemory(tmp_path / "store", engine=engine or FakeEngine(), embedder=FakeEmbedder())
    if not memory.store.skill_names():
        memory.skills.import_folders(pdf_skill(tmp_path / "skills"))
    return memory


def test_the_skill_sits_after_the_apps_system_turns_and_answers_as_its_prefill(tmp_path):
    with _skill_memory(tmp_path) as memory:
        chat = [("system", APP), ("user", QUESTION)]
        answer = memory.answer(chat, OPTIONS)
        block = memory.blocks.get(answer.note.block_id)
        assert answer.note.decision == "graft" and block.text_only
        placed = [("system", APP), ("system", block.source), ("user", QUESTION)]
        assert answer.end.prompt_tokens == len(chat_tokens(memory.engine, placed))
        plain = memory.answer(placed, OPTIONS, route=False)
        assert plain.note.decision == "abstain" and plain.text == answer.text
        assert [s.token for s in plain.end.steps] == [s.token for s in answer.end.steps]


def test_without_an_app_prompt_the_skill_leads_the_chat(tmp_path):
    with _skill_memory(tmp_path) as memory:
        engine = memory.engine
        block = memory.blocks.get(memory.route(QUESTION).block_id)
        tokens, mark = skill_prompt(engine, block.source, [("user", QUESTION)])
        assert tokens == chat_tokens(engine, [("system", block.source), ("user", QUESTION)])
        head = chat_tokens(engine, [("system", block.source), ("user", "")], stop_at_user=True)
        assert mark == len(head) and tokens[:mark] == head


def test_the_skills_state_is_made_on_first_use_and_restored_next_time_and_after_a_restart(tmp_path):
    with _skill_memory(tmp_path) as memory:
        first = memory.answer([("system", APP), ("user", QUESTION)], OPTIONS)
        assert first.note.decision == "graft"
        memory.answer([("system", "Another app entirely. " * 8), ("user", "hello there")], OPTIONS, route=False)
        again = memory.answer([("system", APP), ("user", QUESTION + " into one file")], OPTIONS)
        block = memory.blocks.get(again.note.block_id)
        _, mark = skill_prompt(memory.engine, block.source, [("system", APP), ("user", QUESTION)])
        assert again.note.reused_from == "derived" and again.note.cache_n >= mark
    with _skill_memory(tmp_path) as memory:  # a restart: the state is on disk
        later = memory.answer([("system", APP), ("user", "how do I merge two pdf files")], OPTIONS)
        assert later.note.decision == "graft" and later.note.reused_from == "derived" and later.note.cache_n >= mark


def test_a_skill_that_leaves_the_reply_no_room_is_left_out_and_the_chat_answered(tmp_path):
    with _skill_memory(tmp_path, FakeEngine(n_ctx=1024)) as memory:
        app = "Follow the repository's conventions and keep every answer short. " * 11
        chat = [("system", app), ("user", QUESTION)]
        plain = len(chat_tokens(memory.engine, chat))
        assert plain + 64 < memory.engine.n_ctx
        answer = memory.answer(chat, AnswerOptions(max_tokens=64))
        assert answer.note.routed == "graft" and answer.note.decision == "fallback"
        assert "answered without it" in answer.note.reason and answer.end.prompt_tokens == plain
        roomy = memory.answer([("user", QUESTION)], AnswerOptions(max_tokens=64))
        assert roomy.note.decision == "graft"  # the same skill, beside a shorter chat


def test_warming_a_skill_captures_its_parts_behind_the_apps_prompt_once(tmp_path):
    with _skill_memory(tmp_path) as memory:
        seen = []
        report = memory.skills.warm(["pdf"], system=APP, progress=lambda done, total: seen.append((done, total)))
        parts = memory.skills.get("pdf").parts
        assert len(report.warmed) == len(parts) and not report.kept and not report.left_out
        assert seen[-1] == (len(parts), len(parts))
        again = memory.skills.warm(["pdf"], system=APP)  # resumed or repeated: nothing to do
        assert not again.warmed and len(again.kept) == len(parts)
        block = memory.blocks.get(report.warmed[0]["block_id"])
        answer = memory.answer([("system", APP), ("user", QUESTION)], OPTIONS, block=block)
        assert answer.note.reused_from == "derived" and answer.note.cache_n >= report.warmed[0]["tokens"]


def test_warming_needs_derived_states_and_a_real_prompt(tmp_path):
    import pytest

    from skillgraft.errors import InputError, SkillNotFoundError

    with _skill_memory(tmp_path) as memory:
        with pytest.raises(InputError, match="non-empty"):
            memory.skills.warm(["pdf"], system="  ")
        with pytest.raises(SkillNotFoundError):
            memory.skills.warm(["no-such-skill"])
    with SkillMemory(tmp_path / "store", engine=FakeEngine(), embedder=FakeEmbedder(), derived_bytes=0) as memory:
        with pytest.raises(InputError, match="derived states are off"):
            memory.skills.warm(["pdf"])
