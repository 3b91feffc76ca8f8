"""Routing corrections on the fakes: feedback keys, negatives, the ledger, list/rm, bundles."""

from __future__ import annotations

import json

import pytest

from skillgraft.bundles.transfer import export_bundle, import_bundle
from skillgraft.errors import BlockNotFoundError, InputError
from skillgraft.memory import SkillMemory
from skillgraft.routing.feedback import list_corrections, remove_correction
from skillgraft.testing import FakeEmbedder, FakeEngine

from .conftest import ANSWER, OUT_OF_DOMAIN, QUESTION

MISROUTED = "knead the dough and let it rise"  # shares no word with the sourdough keys
NEAR_OOD = "who won the football world cup in 2002?"


def test_a_misrouted_query_becomes_a_key_of_its_block(fake_stocked, monkeypatch):
    monkeypatch.setenv("SKILLGRAFT_ACTOR", "alice")
    before = fake_stocked.route(MISROUTED)
    assert not (before.decision == "graft" and before.block.name == "sourdough")
    result = fake_stocked.feedback(MISROUTED, "sourdough")
    sourdough = fake_stocked.blocks.get("sourdough")
    assert (result.kind, result.block_id, result.routed) == ("feedback", sourdough.id, before.decision)
    after = fake_stocked.route(MISROUTED)
    assert (after.decision, after.block.name) == ("graft", "sourdough")
    (correction,) = list_corrections(fake_stocked)
    assert (correction.kind, correction.block_id, correction.text, correction.created_by) == \
        ("feedback", sourdough.id, MISROUTED, "alice")
    assert correction.created_at and correction.id == result.correction_id
    (row,) = [r for r in fake_stocked.store.ledger() if r["event"] == "feedback"]
    assert row["decision"] == "feedback" and json.loads(row["detail"])["by"] == "alice"


def test_a_query_already_routed_so_changes_nothing(fake_stocked):
    assert fake_stocked.feedback("how do I bake sourdough bread?", "sourdough").kind == "none"
    assert fake_stocked.feedback(OUT_OF_DOMAIN, None).kind == "none"
    assert list_corrections(fake_stocked) == []


def test_a_negative_makes_that_query_and_close_ones_abstain(fake_stocked):
    query = "my loaf of bread is too dense, what to do about the weather"
    assert fake_stocked.route(query).decision == "graft"
    result = fake_stocked.feedback(query, None)
    assert result.kind == "negative" and result.block_id is None
    again = fake_stocked.route(query)
    assert again.decision == "abstain" and "fitting no skill" in again.reason
    close = fake_stocked.route("my loaf of bread is too dense, what to do about weather")
    assert close.decision == "abstain"
    assert fake_stocked.route("how do I bake sourdough bread?").block.name == "sourdough"  # its own keys still win


def test_a_later_correction_of_the_same_text_replaces_the_earlier(fake_stocked):
    query = "my loaf of bread is too dense, what to do about the weather"
    fake_stocked.feedback(query, None)
    fake_stocked.feedback(query, "git-squash")
    (correction,) = list_corrections(fake_stocked)
    assert correction.kind == "feedback" and fake_stocked.route(query).block.name == "git-squash"


def test_corrections_are_listed_and_removed(fake_stocked):
    fake_stocked.feedback(MISROUTED, "sourdough")
    removed = remove_correction(fake_stocked, list_corrections(fake_stocked)[0].id, by="bob")
    assert removed.text == MISROUTED and list_corrections(fake_stocked) == []
    assert fake_stocked.route(MISROUTED).block is None or fake_stocked.route(MISROUTED).block.name != "sourdough"
    with pytest.raises(InputError, match="no routing correction"):
        remove_correction(fake_stocked, removed.id)
    with pytest.raises(InputError):
        remove_correction(fake_stocked, "one")
    events = [json.loads(r["detail"]) for r in fake_stocked.store.ledger() if r["event"] == "feedback"]
    assert events[0]["by"] == "bob" and events[0]["kind"] == "feedback"


def test_a_plain_key_is_not_a_correction(fake_stocked):
    key = fake_stocked.store.routing_keys()[0]
    with pytest.raises(InputError):
        remove_correction(fake_stocked, key["id"])


def test_corrections_never_touch_a_verified_answer(fake_stocked):
    with pytest.raises(InputError, match="verified question"):
        fake_stocked.feedback(QUESTION, None)
    with pytest.raises(InputError, match="verified question"):
        fake_stocked.feedback("  what is 17*23 ? ", "git-squash")
    assert fake_stocked.recall(QUESTION).decision == "exact" and fake_stocked.recall(QUESTION).block.answer == ANSWER


@pytest.mark.parametrize("query", ["", "  ", "bad \udcff", 7, "x" * 5_000])
def test_hostile_queries_are_input_errors(fake_stocked, query):
    with pytest.raises(InputError):
        fake_stocked.feedback(query, "sourdough")


def test_unknown_blocks_and_bad_expected_values_are_refused(fake_stocked):
    with pytest.raises(BlockNotFoundError):
        fake_stocked.feedback(MISROUTED, "no-such-skill")
    with pytest.raises(InputError):
        fake_stocked.feedback(MISROUTED, 42)
    with pytest.raises(InputError):
        fake_stocked.feedback(MISROUTED, "")


def test_a_removed_block_takes_its_feedback_keys_with_it(fake_stocked):
    fake_stocked.feedback(MISROUTED, "sourdough")
    fake_stocked.blocks.delete("sourdough")
    assert list_corrections(fake_stocked) == []


def test_the_store_caps_corrections(fake_stocked, monkeypatch):
    import skillgraft.routing.feedback as feedback

    monkeypatch.setattr(feedback, "MAX_CORRECTIONS", 1)
    fake_stocked.feedback(MISROUTED, "sourdough")
    with pytest.raises(InputError, match="at most 1"):
        fake_stocked.feedback("my loaf of bread is too dense, what to do about the weather", None)


def test_calibration_counts_a_vetoed_query_as_abstained(fake_stocked):
    query = "my loaf of bread is too dense, what to do about the weather"
    fake_stocked.feedback(query, None)
    (ranking,) = fake_stocked.router.rankings([query])
    assert ranking.best() == (None, -1.0) and ranking.scored  # scores are still there to show


def test_bundles_carry_corrections_as_texts_and_import_embeds_them(fake_stocked, tmp_path):
    fake_stocked.feedback(MISROUTED, "sourdough")
    fake_stocked.feedback("my loaf of bread is too dense, what to do about the weather", None)
    bundle = tmp_path / "skills.tar"
    export_bundle(fake_stocked.store, bundle)
    import tarfile

    with tarfile.open(bundle) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())
    kinds = sorted((c["kind"], c["text"]) for c in manifest["corrections"])
    assert [k for k, _ in kinds] == ["feedback", "negative"] and all("vector" not in c for c in manifest["corrections"])
    with SkillMemory(tmp_path / "other", engine=FakeEngine(), embedder=FakeEmbedder()) as other:
        import_bundle(other, bundle)
        imported = {(c.kind, c.text): c for c in list_corrections(other)}
        assert set(imported) == set(kinds)
        assert imported[("feedback", MISROUTED)].created_by == "import:skills.tar"
        assert other.route(MISROUTED).block.name == "sourdough"
        import_bundle(other, bundle)  # again: the local corrections win, nothing doubles
        assert len(list_corrections(other)) == 2


def test_a_bundle_with_a_bad_correction_is_refused_whole(fake_stocked, tmp_path):
    import io
    import tarfile

    from skillgraft.errors import BundleError

    bundle = tmp_path / "skills.tar"
    export_bundle(fake_stocked.store, bundle)
    with tarfile.open(bundle) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    manifest = json.loads(members["manifest.json"])
    manifest["corrections"] = [{"kind": "feedback", "block_id": "0" * 16, "text": "hello"}]
    members["manifest.json"] = json.dumps(manifest).encode()
    forged = tmp_path / "forged.tar"
    with tarfile.open(forged, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with SkillMemory(tmp_path / "other", engine=FakeEngine(), embedder=FakeEmbedder()) as other:
        with pytest.raises(BundleError, match="names block"):
            import_bundle(other, forged)
        assert other.blocks.list() == []
