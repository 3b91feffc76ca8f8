"""Memory verbs on the fakes; name and text clashes are settled before anything is captured."""

from __future__ import annotations

import pytest

from skillgraft.errors import (
    BlockNotFoundError,
    ConflictError,
    ContextOverflowError,
    DuplicateBlockError,
    InputError,
    NameTakenError,
    VerificationError,
)
from skillgraft.memory import SkillMemory
from skillgraft.core.questions import normalize_question
from skillgraft.testing import FakeEngine

from .conftest import ANSWER, GIT_MANUAL, QUESTION, SOURDOUGH_MANUAL


def test_list_and_get(fake_stocked):
    names = [b.name for b in fake_stocked.blocks.list()]
    assert names[:2] == ["git-squash", "sourdough"] and len(names) == 3
    assert [b.name for b in fake_stocked.blocks.list("manual")] == ["git-squash", "sourdough"]
    solution = fake_stocked.blocks.list("solution")[0]
    for ref in (solution.id, solution.id[:8], solution.name, "what is 17*23"):
        assert fake_stocked.blocks.get(ref).id == solution.id
    with pytest.raises(BlockNotFoundError):
        fake_stocked.blocks.get("no-such-block")


def test_a_taken_name_is_refused_before_capture(fake_stocked, fake_engine):
    captures = fake_engine.calls["capture"]
    with pytest.raises(NameTakenError) as caught:
        fake_stocked.add_manual("git-squash", "Skill manual: something else entirely.")
    assert caught.value.block_id == fake_stocked.blocks.get("git-squash").id
    with pytest.raises(NameTakenError):
        fake_stocked.add_solution("What is 2 + 2?", "4", verifier="exact", expected="4", name="sourdough")
    assert fake_engine.calls["capture"] == captures


def test_the_same_text_under_another_name_is_refused_before_capture(fake_stocked, fake_engine):
    captures = fake_engine.calls["capture"]
    with pytest.raises(DuplicateBlockError) as caught:
        fake_stocked.add_manual("git-again", GIT_MANUAL)
    assert caught.value.name == "git-squash"
    assert fake_engine.calls["capture"] == captures
    again = fake_stocked.add_manual("git-squash", GIT_MANUAL)  # same name, same text: the stored block
    assert again.id == fake_stocked.blocks.get("git-squash").id and fake_engine.calls["capture"] == captures


def test_bad_deposits_capture_nothing(fake_memory, fake_engine):
    for name, text in (("", "text"), ("n", ""), ("n", "a\x00b"), ("bad\nname", "text")):
        with pytest.raises(InputError):
            fake_memory.add_manual(name, text)
    small = FakeEngine(n_ctx=300)
    with SkillMemory(fake_memory.store.home, engine=small, embedder=fake_memory.router.embedder) as mem:
        with pytest.raises(ContextOverflowError):
            mem.add_manual("long", "word " * 100)
        assert small.calls["capture"] == 0
    assert fake_engine.calls["capture"] == 0 and fake_memory.blocks.list() == []


def test_solutions_are_verified_and_never_conflict(fake_stocked, fake_engine):
    captures = fake_engine.calls["capture"]
    with pytest.raises(VerificationError):
        fake_stocked.add_solution("What is 2 + 2?", "5", verifier="exact", expected="4")
    with pytest.raises(ConflictError):
        fake_stocked.add_solution(QUESTION, "392", verifier="exact", expected="392")
    assert fake_stocked.add_solution("what is 17*23", ANSWER, verifier="exact", expected=ANSWER).answer == ANSWER
    assert fake_engine.calls["capture"] == captures


def test_a_solution_another_writer_stores_between_two_reads_is_returned_not_a_name_clash(fake_stocked, monkeypatch):
    stored = fake_stocked.store.solutions_for(normalize_question(QUESTION))[0]
    # As if the other writer committed after this one looked the question up and before it looked the name up.
    monkeypatch.setattr(fake_stocked.store, "solutions_for", lambda key: [])
    assert fake_stocked.add_solution(QUESTION, ANSWER, verifier="exact", expected=ANSWER).id == stored.id
    with pytest.raises(ConflictError):
        fake_stocked.add_solution(QUESTION, "392", verifier="exact", expected="392")


def test_rename_moves_the_name_and_its_routing_key(fake_stocked):
    block = fake_stocked.blocks.get("sourdough")
    renamed = fake_stocked.blocks.rename("sourdough", "bread-baking")
    assert renamed.id == block.id and renamed.name == "bread-baking"
    with pytest.raises(BlockNotFoundError):
        fake_stocked.blocks.get("sourdough")
    names = [k["text"] for k in fake_stocked.store.routing_keys(block.id) if k["kind"] == "name"]
    assert names == ["bread baking"]
    with pytest.raises(NameTakenError):
        fake_stocked.blocks.rename("bread-baking", "git-squash")
    assert fake_stocked.blocks.rename(block.id, "bread-baking").name == "bread-baking"


def test_update_recaptures_new_text_and_replaces_keys(fake_stocked, fake_engine):
    old = fake_stocked.blocks.get("sourdough")
    captures = fake_engine.calls["capture"]
    new_text = SOURDOUGH_MANUAL + " Let the loaf cool for an hour before cutting."
    updated = fake_stocked.blocks.update("sourdough", text=new_text, examples=["why is my crumb gummy?"], description="Bread.")
    assert fake_engine.calls["capture"] == captures + 1
    assert updated.id != old.id and updated.name == "sourdough" and updated.source == new_text
    assert updated.description == "Bread."
    keys = {(k["kind"], k["text"]) for k in fake_stocked.store.routing_keys(updated.id)}
    assert ("example", "why is my crumb gummy?") in keys and ("example", "my loaf is too dense") not in keys
    assert ("name", "sourdough") in keys and ("description", "Bread.") in keys
    assert fake_stocked.recall("why is my crumb gummy?").block.id == updated.id


def test_update_refuses_duplicates_and_solution_edits_before_capture(fake_stocked, fake_engine):
    captures = fake_engine.calls["capture"]
    with pytest.raises(DuplicateBlockError):
        fake_stocked.blocks.update("sourdough", text=GIT_MANUAL)
    with pytest.raises(InputError, match="verified solution"):
        fake_stocked.blocks.update(fake_stocked.blocks.list("solution")[0].id, text="Answer: 392")
    assert fake_engine.calls["capture"] == captures


def test_delete_removes_the_block_its_keys_and_its_route(fake_stocked):
    block = fake_stocked.blocks.get("git-squash")
    path = fake_stocked.store.path_of(block)
    assert fake_stocked.blocks.delete("git-squash").id == block.id
    assert not path.exists() and fake_stocked.store.routing_keys(block.id) == []
    with pytest.raises(BlockNotFoundError):
        fake_stocked.blocks.get(block.id)
    recall = fake_stocked.recall("how do I squash my last commits?")
    assert recall.block is None or recall.block.id != block.id


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(lambda: FakeEngine("another-model"), id="new payloads"),
        pytest.param(lambda: FakeEngine(n_batch=256), id="same payloads"),
    ],
)
def test_recapture_moves_every_block_to_the_current_runtime(fake_stocked, fake_embedder, other):
    home = fake_stocked.store.home
    names = {b.name: b.answer for b in fake_stocked.blocks.list()}
    fake_stocked.close()
    other = other()
    with SkillMemory(home, engine=other, embedder=fake_embedder) as mem:
        report = mem.blocks.recapture()
        assert len(report.recaptured) == 3 and not report.failed and not report.unchanged
        assert {b.name: b.answer for b in mem.blocks.list()} == names
        assert {b.fingerprint_id for b in mem.blocks.list()} == {other.fingerprint.id}
        assert len(mem.blocks.recapture().unchanged) == 3
        assert mem.generate("how do I squash my last commits?", gate=False).decision == "graft"


def test_a_name_that_is_a_block_id_is_refused(fake_stocked):
    git = fake_stocked.blocks.get("git-squash")
    for verb in (
        lambda: fake_stocked.add_manual(git.id, "Skill manual: something else entirely."),
        lambda: fake_stocked.add_solution("What is 2 + 2?", "4", verifier="exact", expected="4", name="0123456789abcdef"),
        lambda: fake_stocked.blocks.rename("sourdough", git.id),
    ):
        with pytest.raises(InputError, match="block id"):
            verb()
    assert fake_stocked.blocks.get(git.id).name == "git-squash"
    assert [c for c, _ in fake_stocked.route("how do I squash my last commits?").candidates][0] == git.id
    for name in ("0123456789ABCDEF", git.id.upper(), git.id[:8], git.id[:4].upper(), "facade"):  # an id, a prefix
        with pytest.raises(InputError, match="block id"):
            fake_stocked.add_manual(name, "Skill manual: hex in capitals.")
    with pytest.raises(InputError, match="block id"):
        fake_stocked.blocks.rename("sourdough", git.id[:8])
    assert fake_stocked.blocks.get(git.id[:8]).name == "git-squash"


def test_a_manual_named_like_a_verified_question_is_refused(fake_stocked):
    solution = fake_stocked.blocks.list("solution")[0]
    for name in (solution.question, solution.question.upper(), solution.name, "solution-mine"):
        with pytest.raises(InputError, match="verified question"):
            fake_stocked.add_manual(name, "Skill manual: a squatter.")
    assert fake_stocked.blocks.get(solution.name).kind == "solution"


@pytest.mark.parametrize("question", ["?", "\u200b?", " ？ ", "\u2060\u200d"])
def test_a_question_of_nothing_visible_is_never_stored_nor_answered(fake_stocked, fake_engine, question):
    captures, solutions = fake_engine.calls["capture"], fake_stocked.blocks.list("solution")
    with pytest.raises(InputError, match="nothing"):
        fake_stocked.add_solution(question, "42", verifier="exact", expected="42")
    assert fake_engine.calls["capture"] == captures
    assert fake_stocked.blocks.list("solution") == solutions
    assert fake_stocked.recall(question).decision != "exact"


def test_an_update_of_a_block_another_writer_replaced_meanwhile_changes_nothing(fake_stocked, monkeypatch):
    stale = fake_stocked.blocks.get("sourdough")
    current = fake_stocked.blocks.update("sourdough", text=SOURDOUGH_MANUAL + " Cool it for an hour.")
    monkeypatch.setattr(fake_stocked.blocks, "get", lambda ref: stale)  # as the other writer read it
    with pytest.raises(BlockNotFoundError, match="another writer meanwhile"):
        fake_stocked.blocks.update("sourdough", text=SOURDOUGH_MANUAL + " Slice it cold.")
    monkeypatch.undo()
    assert fake_stocked.blocks.get("sourdough").id == current.id
    assert fake_stocked.blocks.check().ok  # no payload left without a catalog row
