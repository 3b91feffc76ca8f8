"""``copy_store``: a store copied into another keeps what a user stored — blocks with a state,
manuals stored as text, imported skills (versions, files, default, expiry, pin) and apps."""

from __future__ import annotations

from skillgraft.memory import SkillMemory
from skillgraft.cli.migrate import _render
from skillgraft.memory.migrate import copy_store

from .conftest import GIT_MANUAL, GIT_QUERY
from .skill_folders import git_skill, pdf_skill, write_skill

NOTES = "Skill manual: release notes. Write one line per change, newest first, and name the ticket of each."


def test_a_copy_keeps_text_manuals_imported_skills_and_apps_and_copying_again_adds_nothing(
        fake_memory, tmp_path, fake_engine, fake_embedder):
    source = fake_memory
    captured = source.add_manual("git-rebase", GIT_MANUAL, examples=["how do I rebase?"])
    text = source.add_manual("release-notes", NOTES, examples=["how do I write release notes?"], capture=False)
    source.skills.import_folders([git_skill(tmp_path / "skills"), pdf_skill(tmp_path / "skills")], expires="30d")
    source.skills.import_folders([write_skill(tmp_path / "v2", "git-squash", "Squash git commits into one.",
                                      "# Squash\n\nSquash with git rebase -i and mark the commits as fixup.\n")])
    source.skills.set_default("git-squash", 1)
    source.store.set_skill_pin("pdf", True)
    source.apps.add("coder", "You are a coding agent. Keep changes small.")
    with SkillMemory(tmp_path / "copy", engine=fake_engine, embedder=fake_embedder) as copy:
        report = copy_store(source.store, copy.store)
        assert report.ok, report.as_dict()
        assert {captured.id, text.id} <= set(report.copied)
        assert sorted(report.skills) == ["git-squash@v1", "git-squash@v2", "pdf@v1"] and report.apps == ["coder"]
        assert {b.id for b in copy.store.blocks()} == {b.id for b in source.store.blocks()}
        assert copy.store.get(text.id).text_only and copy.store.get(text.id).source == NOTES
        assert copy.skills.names() == ["git-squash", "pdf"] and copy.skills.get("git-squash").version == 1
        assert copy.skills.get("git-squash").versions == [1, 2]
        for name in ("git-squash", "pdf"):
            assert copy.skills.get(name).files == source.skills.get(name).files
        assert copy.store.skill_expiries() == source.store.skill_expiries() and copy.store.pinned_skills() == ["pdf"]
        assert [a.name for a in copy.apps.list()] == ["coder"]
        assert copy.route(GIT_QUERY).block_id == source.route(GIT_QUERY).block_id
        assert copy.route("how do I write release notes?").block_id == text.id
        again = copy_store(source.store, copy.store)
        assert again.ok and again.copied == [] and again.skills == [] and again.apps == [] and again.keys_added == 0


def test_a_skill_version_whose_blocks_did_not_arrive_is_skipped_and_said(fake_memory, tmp_path, fake_engine, fake_embedder):
    fake_memory.skills.import_folders([git_skill(tmp_path / "skills")])
    part = fake_memory.skills.get("git-squash").parts[0].block_id
    fake_memory.store.quarantine(fake_memory.store.get(part), "damaged for the test")
    with SkillMemory(tmp_path / "copy", engine=fake_engine, embedder=fake_embedder) as copy:
        report = copy_store(fake_memory.store, copy.store)
        assert not report.ok and report.skills == []
        assert {"skill": "git-squash", "version": 1, "problem": f"its blocks {part} were not copied"} in report.skipped
        assert copy.skills.names() == []


def test_an_app_row_edited_in_the_source_is_skipped_and_said(fake_memory, tmp_path, fake_engine, fake_embedder):
    fake_memory.apps.add("coder", "You are a coding agent. Keep changes small.")
    with fake_memory.store.catalog.write() as conn:  # rows no app verb would store
        conn.execute("INSERT INTO app_prefixes (name, system, created_at) VALUES (?, ?, ?)", ("", "You are terse.", "x"))
        conn.execute("INSERT INTO app_prefixes (name, system, created_at) VALUES (?, ?, ?)", ("nul", "a\x00b", "x"))
    with SkillMemory(tmp_path / "copy", engine=fake_engine, embedder=fake_embedder) as copy:
        report = copy_store(fake_memory.store, copy.store)
        assert report.apps == ["coder"] and [a.name for a in copy.apps.list()] == ["coder"]
        assert sorted(item["app"] for item in report.skipped) == ["", "nul"] and not report.ok
        problems = {item["app"]: item["problem"] for item in report.skipped}
        assert problems[""].startswith("an app cannot have") and "NUL" in problems["nul"]
        assert "skipped   app 'nul': " in _render(report.as_dict())
