"""A manual's own sentences route to it: split, bounded, replaced with the text."""

from __future__ import annotations

import pytest

from skillgraft.errors import EngineError
from skillgraft.routing.router import MAX_MANUAL_KEYS, MAX_QUERY_CHARS, manual_key_texts

from .conftest import GIT_MANUAL, SOURDOUGH_MANUAL


def test_sentences_become_keys_and_fragments_are_dropped():
    text = "Feed the starter daily. Bake at 250 C!\nUse a Dutch oven; keep the lid on. Yes. Why is it flat?"
    assert manual_key_texts(text) == [
        "Feed the starter daily.", "Bake at 250 C!", "Use a Dutch oven;", "keep the lid on.", "Why is it flat?",
    ]
    assert manual_key_texts("") == [] and manual_key_texts("Two words.") == []
    lines = "First line has words\u2028second line has words\x85third line has words\r\nfourth line has words"
    assert manual_key_texts(lines) == ["First line has words", "second line has words", "third line has words",
                                       "fourth line has words"]


def test_a_long_manual_is_joined_into_a_bounded_number_of_keys_in_order():
    sentences = [f"Step number {i} of the recipe." for i in range(1, 301)]
    keys = manual_key_texts(" ".join(sentences))
    assert 0 < len(keys) <= MAX_MANUAL_KEYS
    assert " ".join(keys) == " ".join(sentences)
    assert manual_key_texts("word " * 5_000 + ".")[0] == ("word " * 5_000)[:MAX_QUERY_CHARS]


def test_add_manual_and_update_keep_the_manual_keys_in_step_with_the_text(fake_stocked):
    def manual_keys(block):
        return [k["text"] for k in fake_stocked.store.routing_keys(block.id) if k["kind"] == "manual"]

    block = fake_stocked.blocks.get("sourdough")
    assert manual_keys(block) == manual_key_texts(SOURDOUGH_MANUAL)
    new_text = "Proof the dough overnight in the fridge. Score it with a razor before baking."
    updated = fake_stocked.blocks.update("sourdough", text=new_text)
    assert manual_keys(updated) == manual_key_texts(new_text)
    same = fake_stocked.blocks.update("sourdough", examples=["why is my crumb gummy?"])
    assert manual_keys(same) == manual_key_texts(new_text)


def test_check_repair_gives_a_manual_stored_without_sentence_keys_its_keys(fake_stocked):
    block = fake_stocked.blocks.get("sourdough")
    fake_stocked.store.delete_routing_keys(block.id, kind="manual")  # as a store written before manual keys
    assert fake_stocked.blocks.check().ok and not fake_stocked.blocks.check().repaired
    report = fake_stocked.blocks.check(repair=True)
    assert report.ok and [r["block_id"] for r in report.repaired] == [block.id]
    keys = [k["text"] for k in fake_stocked.store.routing_keys(block.id) if k["kind"] == "manual"]
    assert keys == manual_key_texts(SOURDOUGH_MANUAL)
    assert not fake_stocked.blocks.check(repair=True).repaired


def test_an_update_whose_keys_cannot_be_embedded_changes_nothing(fake_stocked, monkeypatch):
    block = fake_stocked.blocks.get("sourdough")
    keys = fake_stocked.store.routing_keys(block.id)

    def fail(texts):
        raise EngineError("the embedder is gone")

    monkeypatch.setattr(fake_stocked.router.embedder, "encode", fail)
    with pytest.raises(EngineError):
        fake_stocked.blocks.update("sourdough", text="Proof the dough overnight in the fridge. Score it with a razor.")
    with pytest.raises(EngineError):
        fake_stocked.blocks.update("sourdough", description="bread baking", examples=["why is my crumb gummy?"])
    assert fake_stocked.blocks.get("sourdough") == block
    assert fake_stocked.store.routing_keys(block.id) == keys


def test_check_repair_replaces_manual_keys_that_are_not_the_manual_s_sentences(fake_stocked):
    block = fake_stocked.blocks.get("sourdough")
    # As a manual whose text was swapped without its sentence keys: the keys describe another text.
    fake_stocked.store.delete_routing_keys(block.id, kind="manual")
    fake_stocked.router.add_keys(block, manual_key_texts(GIT_MANUAL), kind="manual")
    report = fake_stocked.blocks.check(repair=True)
    assert report.ok and [r["block_id"] for r in report.repaired] == [block.id]
    keys = [k["text"] for k in fake_stocked.store.routing_keys(block.id) if k["kind"] == "manual"]
    assert keys == manual_key_texts(SOURDOUGH_MANUAL)
    assert not fake_stocked.blocks.check(repair=True).repaired
