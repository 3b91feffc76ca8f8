"""Memory verbs on the facade: list, get, update, rename, delete, recapture."""

from __future__ import annotations

import pytest

from skillgraft.errors import BlockNotFoundError, ContextOverflowError, DuplicateBlockError, InputError, NameTakenError

from .conftest import GIT_MANUAL, SOURDOUGH_MANUAL


def test_list_and_get_by_id_name_prefix_and_question(stocked):
    names = [b.name for b in stocked.blocks.list()]
    assert names[:2] == ["git-squash", "sourdough"] and len(names) == 3
    assert [b.kind for b in stocked.blocks.list("solution")] == ["solution"]
    git = stocked.blocks.get("git-squash")
    assert stocked.blocks.get(git.id) == git and stocked.blocks.get(git.id[:6]) == git
    solution = stocked.blocks.get("what is 17*23")
    assert solution.kind == "solution" and solution.answer == "391"
    assert solution.name.startswith("solution-what-is-17-23")
    with pytest.raises(BlockNotFoundError):
        stocked.blocks.get("What is 17 * 24?")


def test_taken_name_and_duplicate_text_are_settled_before_capture(stocked, monkeypatch):
    def no_capture(*args, **kwargs):
        raise AssertionError("captured although the deposit was refused")

    monkeypatch.setattr(stocked.engine, "capture", no_capture)
    with pytest.raises(NameTakenError) as taken:
        stocked.add_manual("git-squash", "A different manual about something else entirely.")
    assert taken.value.name == "git-squash" and taken.value.block_id == stocked.blocks.get("git-squash").id
    with pytest.raises(DuplicateBlockError) as duplicate:
        stocked.add_manual("git-squash-copy", GIT_MANUAL)
    assert duplicate.value.name == "git-squash"
    assert stocked.add_manual("git-squash", GIT_MANUAL).name == "git-squash"  # idempotent
    assert "git-squash-copy" not in [b.name for b in stocked.blocks.list()]


def test_rename_moves_the_name_key(stocked):
    renamed = stocked.blocks.rename("sourdough", "bread-baking")
    assert renamed.name == "bread-baking" and stocked.blocks.get("bread-baking").id == renamed.id
    keys = [k["text"] for k in stocked.store.routing_keys(renamed.id) if k["kind"] == "name"]
    assert keys == ["bread baking"]
    with pytest.raises(NameTakenError):
        stocked.blocks.rename("bread-baking", "git-squash")
    assert stocked.route("how do I bake sourdough bread?").block_id == renamed.id


def test_update_recaptures_keeping_name_and_keys(stocked):
    old = stocked.blocks.get("git-squash")
    new_text = GIT_MANUAL + " Use git reflog to undo a bad rebase."
    updated = stocked.blocks.update("git-squash", text=new_text, examples=["how do I undo a rebase?"])
    assert updated.name == "git-squash" and updated.id != old.id and updated.source == new_text
    with pytest.raises(BlockNotFoundError):
        stocked.store.get(old.id)
    assert not stocked.store.path_of(old).exists() and stocked.store.path_of(updated).exists()
    kinds = sorted((k["kind"], k["text"]) for k in stocked.store.routing_keys(updated.id))
    assert ("example", "how do I undo a rebase?") in kinds and ("name", "git squash") in kinds
    assert ("example", "combine commits into one") not in kinds
    assert stocked.route("how do I undo a rebase?").block_id == updated.id
    result = stocked.generate("how do I undo a rebase?", max_tokens=4, gate=False)
    assert result.decision == "graft" and result.block_id == updated.id
    with pytest.raises(DuplicateBlockError):
        stocked.blocks.update("git-squash", text=SOURDOUGH_MANUAL)
    with pytest.raises(InputError):
        stocked.blocks.update(stocked.blocks.get("what is 17*23").id, text="Answer: 390")


def test_delete_removes_block_keys_and_file(stocked):
    block = stocked.blocks.get("sourdough")
    stocked.blocks.delete("sourdough")
    assert "sourdough" not in [b.name for b in stocked.blocks.list()]
    assert not stocked.store.routing_keys(block.id) and not stocked.store.path_of(block).exists()


def test_recapture_leaves_current_blocks_alone(stocked):
    report = stocked.blocks.recapture()
    assert len(report.unchanged) == 3 and not report.recaptured and not report.failed


def test_a_block_must_leave_room_for_questions(memory):
    with pytest.raises(ContextOverflowError):
        memory.add_manual("huge", "word " * (memory.engine.n_ctx - 100))
    assert memory.blocks.list() == []


def test_nul_bytes_are_refused_not_truncated(memory):
    with pytest.raises(InputError, match="NUL"):
        memory.add_manual("nul", "Skill manual: first part.\x00 Hidden second part.")
    with pytest.raises(InputError, match="NUL"):
        memory.recall("what is\x00 this")
    assert memory.blocks.list() == []


def test_a_manuals_own_sentences_route_to_it_and_follow_its_text(stocked):
    """Real MiniLM: sentence keys lift a query the manual answers; repair and update keep them in step."""
    from skillgraft.routing.router import manual_key_texts

    manual = ("Skill manual: changing a flat tire. Loosen the lug nuts before you raise the car with the jack. "
              "Tighten the lug nuts in a star pattern once the spare is on.")
    block = stocked.add_manual("tire-change", manual, description="Changing a flat tire.")
    query = "in what order should I tighten the lug nuts?"

    def sentence_keys(ref):
        return [k["text"] for k in stocked.store.routing_keys(stocked.blocks.get(ref).id) if k["kind"] == "manual"]

    with_keys = stocked.route(query)
    assert with_keys.decision == "graft" and with_keys.block.id == block.id
    assert sentence_keys("tire-change") == manual_key_texts(manual)
    stocked.store.delete_routing_keys(block.id, kind="manual")  # as a store written before sentence keys
    without = stocked.route(query)
    assert (without.block_id != block.id) or without.score < with_keys.score
    report = stocked.blocks.check(repair=True)
    assert report.ok and [r["block_id"] for r in report.repaired] == [block.id]
    assert stocked.route(query).score == pytest.approx(with_keys.score, abs=1e-6)

    new_manual = ("Skill manual: changing a flat tire. Check the spare's pressure every month. "
                  "Replace a spare that is older than six years.")
    updated = stocked.blocks.update("tire-change", text=new_manual)
    assert sentence_keys(updated.id) == manual_key_texts(new_manual)
    assert stocked.route("how often should I check the spare's pressure?").block.id == updated.id
