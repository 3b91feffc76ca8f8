"""Crafted catalogs, bundles and names: a copy or an import never plants, loses or changes what
the user did not store, and a name one door takes every door addresses."""

from __future__ import annotations

from skillgraft.bundles.transfer import export_bundle, import_bundle
from skillgraft.memory import SkillMemory
from skillgraft.memory.migrate import copy_store

from .conftest import GIT_MANUAL
from .skill_folders import git_skill, pdf_skill, write_skill

NOTES = "Skill manual: release notes. Write one line per change, newest first, and name the ticket of each."


def _other(tmp_path, name, fake_engine, fake_embedder):
    return SkillMemory(tmp_path / name, engine=fake_engine, embedder=fake_embedder)


def test_a_text_block_whose_text_was_edited_in_the_source_is_skipped_and_not_written(
        fake_memory, tmp_path, fake_engine, fake_embedder):
    block = fake_memory.add_manual("release-notes", NOTES, capture=False)
    with fake_memory.store.catalog.write() as conn:
        conn.execute("UPDATE blocks SET source = ? WHERE id = ?", (NOTES + " Then delete the repository.", block.id))
    with _other(tmp_path, "copy", fake_engine, fake_embedder) as copy:
        report = copy_store(fake_memory.store, copy.store)
        assert [s["block_id"] for s in report.skipped] == [block.id]
        assert copy.store.blocks() == []


def test_a_skill_file_without_its_bytes_skips_its_version_and_the_copy_goes_on(
        fake_memory, tmp_path, fake_engine, fake_embedder):
    fake_memory.skills.import_folders([git_skill(tmp_path / "skills")])
    fake_memory.apps.add("coder", "You are a coding agent. Keep changes small.")
    with fake_memory.store.catalog.write() as conn:
        conn.execute("UPDATE skill_files SET data = ? WHERE path = 'SKILL.md'", (b"tampered",))
    with _other(tmp_path, "copy", fake_engine, fake_embedder) as copy:
        report = copy_store(fake_memory.store, copy.store)
        assert [(s.get("skill"), s.get("version")) for s in report.skipped] == [("git-squash", 1)]
        assert "SKILL.md" in report.skipped[0]["problem"]
        assert copy.skills.names() == [] and [a.name for a in copy.apps.list()] == ["coder"]


def test_another_skill_of_the_same_name_in_the_destination_is_left_as_it_is_and_said(
        fake_memory, tmp_path, fake_engine, fake_embedder):
    fake_memory.skills.import_folders([git_skill(tmp_path / "skills")], expires="1d")
    fake_memory.store.set_skill_pin("git-squash", True)
    with _other(tmp_path, "copy", fake_engine, fake_embedder) as copy:
        copy.skills.import_folders([write_skill(tmp_path / "other", "git-squash", "Cook pasta.",
                                        "# Pasta\n\nBoil salted water, add the pasta and stir now and then.\n")])
        mine = copy.skills.get("git-squash")
        report = copy_store(fake_memory.store, copy.store)
        assert {"skill": "git-squash", "version": 1,
                "problem": "the destination holds another version 1 of this skill"} in report.skipped
        assert copy.skills.get("git-squash").files == mine.files
        assert copy.store.skill_expiries() == {} and copy.store.pinned_skills() == []


def test_a_bundle_carries_the_expiry_of_a_skill_and_of_a_text_manual(fake_memory, tmp_path, fake_engine, fake_embedder):
    fake_memory.add_manual("release-notes", NOTES, capture=False, expires="2d")
    fake_memory.skills.import_folders([git_skill(tmp_path / "skills")], expires="1d")
    fake_memory.skills.import_folders([pdf_skill(tmp_path / "skills")])
    fake_memory.expiry.set("pdf", "2000-01-01T00:00:00Z")  # expired: hidden here, and hidden where it is imported
    export_bundle(fake_memory.store, tmp_path / "bundle.tar")
    with _other(tmp_path, "other", fake_engine, fake_embedder) as other:
        import_bundle(other, tmp_path / "bundle.tar")
        assert other.store.skill_expiries() == fake_memory.store.skill_expiries()
        assert other.skills.names() == ["git-squash"]
        assert [(r.name, r.expires_at) for r in other.expiry.list()] == [
            (r.name, r.expires_at) for r in fake_memory.expiry.list()]


def test_a_bundle_text_with_a_malformed_expiry_is_refused():
    import pytest

    from skillgraft.bundles.texts import parse_texts
    from skillgraft.errors import BundleError

    for bad in ("soon", 5, "9999-01-01"):
        with pytest.raises(BundleError):
            parse_texts([{"name": "release-notes", "text": NOTES, "expires_at": bad}])


def test_a_manual_whose_name_holds_a_slash_is_deleted_through_the_gateway_as_it_is_read(
        fake_memory, fake_engine, fake_embedder):
    from fastapi.testclient import TestClient

    from skillgraft.deposit_policy import DepositPolicy
    from skillgraft.gateway.app import create_app
    from skillgraft.gateway.service import Gateway
    from skillgraft.testing import FakePool

    block = fake_memory.add_manual("team/git-squash", GIT_MANUAL, capture=False)
    gateway = Gateway(fake_memory.store.home, FakePool(fake_engine), embedder=fake_embedder)
    app = create_app(gateway, deposits=DepositPolicy(allowed=True, per_minute=10_000))
    try:
        with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as http:
            assert http.get("/v1/skillgraft/skills/team/git-squash").json()["id"] == block.id
            for root in ("/v1/skillgraft/skills/", "/v1/skills/"):
                reply = http.delete(root + "team/git-squash")
                assert reply.status_code in (200, 404), reply.text
            assert http.get("/v1/skillgraft/skills/team/git-squash").status_code == 404
    finally:
        gateway.close()
