"""Bundles carry imported skills: versions and manifests, every file once, checked on import."""

from __future__ import annotations

import io
import json
import tarfile

import pytest

from skillgraft.bundles.transfer import export_bundle, import_bundle
from skillgraft.errors import BundleError, NameTakenError, SkillFolderError
from skillgraft.memory import SkillMemory
from skillgraft.testing import FakeEmbedder, FakeEngine

from .conftest import GIT_MANUAL
from .skill_folders import pdf_skill


@pytest.fixture
def two_versions(fake_memory, tmp_path):
    folder = pdf_skill(tmp_path / "in")
    fake_memory.add_manual("git-squash", GIT_MANUAL)
    fake_memory.skills.import_folders(folder)
    (folder / "SKILL.md").write_text((folder / "SKILL.md").read_text() + "\n## Splitting\n\nOne file per page.\n")
    fake_memory.skills.import_folders(folder)
    fake_memory.skills.set_default("pdf", 1)
    return fake_memory


def test_a_bundle_carries_a_skill_with_its_versions_and_manifest(two_versions, tmp_path):
    bundle = tmp_path / "b.tar"
    report = export_bundle(two_versions.store, bundle)
    assert (report.blocks, report.skills) == (1, 1)
    with tarfile.open(bundle) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())
        names = tar.getnames()
    assert [row["name"] for row in manifest["blocks"]] == ["git-squash"]  # a skill's blocks are not rows
    [entry] = manifest["skills"]
    assert entry["name"] == "pdf" and entry["default_version"] == 1 and [v["version"] for v in entry["versions"]] == [1, 2]
    shas = {f["sha256"] for v in entry["versions"] for f in v["files"]}
    assert {n for n in names if n.startswith("skills/")} == {f"skills/{s}" for s in shas}  # each file once
    with SkillMemory(tmp_path / "other", engine=FakeEngine(), embedder=FakeEmbedder()) as other:
        report = import_bundle(other, bundle)
        assert [(s["name"], s["version"], s["how"]) for s in report.skills] == [("pdf", 1, "imported"), ("pdf", 2, "imported")]
        skill = other.skills.get("pdf")
        assert skill.versions == [1, 2] and skill.default_version == 1
        assert skill.manifest_sha256 == two_versions.skills.get("pdf").manifest_sha256
        assert skill.folder == "bundle:b.tar#pdf@v1" and other.skills.changes() == []
        with pytest.raises(SkillFolderError, match="not a folder"):
            other.skills.update("pdf")
        out = other.skills.export("pdf", tmp_path / "out", version=2)
        assert (tmp_path / "out" / "pdf" / "SKILL.md").read_bytes() == (tmp_path / "in" / "pdf" / "SKILL.md").read_bytes()
        again = import_bundle(other, bundle)
        assert [s["how"] for s in again.skills] == ["unchanged", "unchanged"] and out.version == 2


def _rewrite(bundle, path, change):
    """The bundle at ``bundle`` written again to ``path`` with ``change(manifest, files)`` applied."""
    with tarfile.open(bundle) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
    manifest = json.loads(files.pop("manifest.json"))
    change(manifest, files)
    with tarfile.open(path, "w") as tar:
        for name, data in {**files, "manifest.json": json.dumps(manifest).encode()}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


@pytest.mark.parametrize("change, message", [
    (lambda m, f: m["skills"][0]["versions"][0]["files"][0].update(path="../../escape.md"), "not a plain"),
    (lambda m, f: m["skills"][0]["versions"][0]["files"][0].update(path="/etc/passwd"), "not a plain"),
    (lambda m, f: m["skills"][0].update(name="\x1b[2J"), "usable, unique"),
    (lambda m, f: m["skills"][0].update(default_version=9), "default"),
    (lambda m, f: m["skills"][0]["versions"][0]["files"][0].update(size=1 << 40), "another size"),
    (lambda m, f: [f.pop(n) for n in list(f) if n.startswith("skills/")][:1], "missing"),
])
def test_a_hostile_skill_entry_refuses_the_whole_bundle(two_versions, tmp_path, change, message):
    bundle = tmp_path / "b.tar"
    export_bundle(two_versions.store, bundle)
    bad = tmp_path / "bad.tar"
    _rewrite(bundle, bad, change)
    with SkillMemory(tmp_path / "other", engine=FakeEngine(), embedder=FakeEmbedder()) as other:
        with pytest.raises(BundleError, match=message):
            import_bundle(other, bad)
        assert other.blocks.list() == [] and other.skills.list() == []
    assert not (tmp_path / "escape.md").exists()


def test_a_file_whose_bytes_do_not_match_its_hash_is_refused(two_versions, tmp_path):
    bundle = tmp_path / "b.tar"
    export_bundle(two_versions.store, bundle)
    bad = tmp_path / "bad.tar"

    def swap(manifest, files):
        name = next(n for n in files if n.startswith("skills/"))
        files[name] = bytes(len(files[name]))

    _rewrite(bundle, bad, swap)
    with SkillMemory(tmp_path / "other", engine=FakeEngine(), embedder=FakeEmbedder()) as other:
        with pytest.raises(BundleError, match="does not match its SHA-256"):
            import_bundle(other, bad)
        assert other.skills.list() == [] and other.blocks.list() == []  # refused before any deposit


def test_an_import_that_fails_at_its_last_step_leaves_the_store_as_it_was(two_versions, tmp_path):
    """A text manual whose name is taken here fails the import after its blocks and skill
    versions were stored: all of them are removed again and the skill's default set back."""
    two_versions.add_manual("sourdough", "Sourdough: feed the starter, fold, proof overnight.", capture=False)
    bundle = tmp_path / "b.tar"
    export_bundle(two_versions.store, bundle)
    folder = pdf_skill(tmp_path / "here")
    with SkillMemory(tmp_path / "fresh", engine=FakeEngine(), embedder=FakeEmbedder()) as fresh:
        fresh.skills.import_folders(folder)
        (folder / "SKILL.md").write_text((folder / "SKILL.md").read_text() + "\n## Merging\n\nOne file in the end.\n")
        fresh.skills.import_folders(folder)
        fresh.add_manual("sourdough", "Sourdough, another way: a stiff starter and a cold retard.", capture=False)
        blocks = {b.id for b in fresh.store.blocks()}
        versions, default = [v["version"] for v in fresh.store.skill_versions("pdf")], fresh.store.skill_default("pdf")
        assert default == 2
        with pytest.raises(NameTakenError):
            import_bundle(fresh, bundle)
        assert {b.id for b in fresh.store.blocks()} == blocks
        assert [v["version"] for v in fresh.store.skill_versions("pdf")] == versions
        assert fresh.store.skill_default("pdf") == default and fresh.skills.names() == ["pdf"]
        assert all(b.name != "git-squash" for b in fresh.store.blocks())


def test_a_failed_import_gives_a_stored_skills_blocks_their_keys_back(two_versions, tmp_path):
    """The bundle's version of a skill stored here shares its body block and replaces its keys
    (the stored one had examples from its eval queries); the import then fails: the block's
    keys are what they were."""
    two_versions.add_manual("sourdough", "Sourdough: feed the starter, fold, proof overnight.", capture=False)
    bundle = tmp_path / "b.tar"
    export_bundle(two_versions.store, bundle)
    with SkillMemory(tmp_path / "fresh", engine=FakeEngine(), embedder=FakeEmbedder()) as fresh:
        folder = pdf_skill(tmp_path / "here")
        queries = ["fill a pdf form for me", "merge these two pdf files", "extract text from this pdf",
                   "split a pdf into pages", "read the fields of a pdf form", "combine scanned pdfs"]
        (folder / "eval_queries.json").write_text(json.dumps([{"query": q, "should_trigger": True} for q in queries]))
        fresh.skills.import_folders(folder)
        fresh.add_manual("sourdough", "Sourdough, another way: a stiff starter and a cold retard.", capture=False)

        def keys() -> dict:
            return {b.id: sorted((k["kind"], k["text"]) for k in fresh.store.routing_keys(b.id)) for b in fresh.store.blocks()}

        before = keys()
        replaced = []
        replace = fresh.store.replace_routing_keys
        fresh.store.replace_routing_keys = lambda *a, **k: replaced.append(a[0]) or replace(*a, **k)
        with pytest.raises(NameTakenError):
            import_bundle(fresh, bundle)
        assert replaced and keys() == before  # the import replaced some, the undo put them back
