"""Manuals stored as text travel in a bundle's ``texts`` and come back as text, checked first."""

from __future__ import annotations

import json
import tarfile

import pytest

from skillgraft.bundles.texts import parse_texts
from skillgraft.bundles.transfer import export_bundle, import_bundle
from skillgraft.errors import BundleError
from skillgraft.memory import SkillMemory
from skillgraft.testing import FakeEmbedder, FakeEngine

MANUAL = "Baking sourdough: feed the starter the night before, mix, fold four times, proof overnight."


def test_a_text_manual_is_exported_and_imported_as_text(tmp_path):
    with SkillMemory(tmp_path / "a", engine=FakeEngine(), embedder=FakeEmbedder()) as memory:
        block = memory.add_manual("sourdough", MANUAL, examples=["how do I bake sourdough?"], description="Bread.",
                                  capture=False)
        memory.add_manual("git-squash", "Squash commits with git rebase -i.")
        report = export_bundle(memory.store, tmp_path / "out.tar")
    assert report.blocks == 2
    with tarfile.open(tmp_path / "out.tar") as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
    assert [t["name"] for t in manifest["texts"]] == ["sourdough"] and len(manifest["blocks"]) == 1
    with SkillMemory(tmp_path / "b", engine=FakeEngine(), embedder=FakeEmbedder()) as fresh:
        imported = import_bundle(fresh, tmp_path / "out.tar")
        assert {(b.name, b.how) for b in imported.imported} >= {("sourdough", "text")}
        again = fresh.blocks.get("sourdough")
        assert again.id == block.id and again.text_only and again.description == "Bread."
        assert {k["text"] for k in fresh.store.routing_keys(again.id) if k["kind"] == "example"} == {"how do I bake sourdough?"}


@pytest.mark.parametrize("raw, message", [
    ("texts", "must be a list"),
    ([7], "is not an object"),
    ([{"name": "deadbeef", "text": "x"}], "id-like"),
    ([{"name": "a", "text": "x"}, {"name": "a", "text": "y"}], "repeated"),
    ([{"name": "a", "text": "  "}], "its text is empty"),
    ([{"name": "a", "text": "x\x00"}], "without NUL"),
    ([{"name": "a", "text": "x", "examples": [3]}], "'example' must be text"),
    ([{"name": "a", "text": "x", "examples": "q"}], "examples must be a list"),
])
def test_a_malformed_texts_entry_is_refused(raw, message):
    with pytest.raises(BundleError, match=message):
        parse_texts(raw)
