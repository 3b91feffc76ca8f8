"""A skill folder is attacker-controlled input: each hostile shape is a clear reason or a
file left out, nothing is read or written outside, and nothing stored is lost."""

from __future__ import annotations

import os

import pytest

from skillgraft.skills.folder import MAX_FILES, MAX_SKILL_MD_BYTES, read_skill_folder
from skillgraft.skills.scan import scan_for_skills
from skillgraft.errors import SkillFolderError

from .skill_folders import git_skill, pdf_skill, write_skill

SECRET = "the secret outside every skill folder"


def skipped_reason(memory, root) -> str:
    report = memory.skills.import_folders(root)
    assert report.imported == [] and len(report.skipped) == 1, report
    return report.skipped[0]["reason"]


@pytest.fixture
def stocked(fake_memory, tmp_path):
    """A memory holding one good skill; every test checks it is still whole afterwards."""
    fake_memory.skills.import_folders(git_skill(tmp_path / "good"))
    before = (fake_memory.skills.get("git-squash"), {b.id for b in fake_memory.blocks.list()})
    yield fake_memory
    assert fake_memory.skills.get("git-squash") == before[0] and before[1] <= {b.id for b in fake_memory.blocks.list()}
    assert fake_memory.blocks.check().ok


def all_sources(memory) -> str:
    return "\n".join(b.source for b in memory.blocks.list())


def test_links_out_of_the_folder_are_never_followed(stocked, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text(SECRET)
    folder = write_skill(tmp_path / "bad", "linky", "A skill with links.", "# Links\n\nSee references.\n")
    (folder / "references").mkdir()
    os.symlink(outside / "secret.md", folder / "references" / "secret.md")
    os.symlink(outside, folder / "assets")
    report = stocked.skills.import_folders(folder)
    assert [s.name for s in report.imported] == ["linky"]
    warnings = report.imported[0].warnings
    assert any("references/secret.md: a link" in w for w in warnings) and any("assets: a link" in w for w in warnings)
    assert SECRET not in all_sources(stocked)
    assert [f["path"] for f in stocked.skills.get("linky").files] == ["SKILL.md"]


def test_a_skill_md_that_is_a_link_is_skipped(stocked, tmp_path):
    outside = tmp_path / "real.md"
    outside.write_text("---\nname: sneaky\ndescription: A linked skill.\n---\nBody\n")
    folder = tmp_path / "bad" / "sneaky"
    folder.mkdir(parents=True)
    os.symlink(outside, folder / "SKILL.md")
    assert "no readable SKILL.md" in skipped_reason(stocked, folder)


def test_absolute_and_parent_paths_in_a_body_lead_nowhere(stocked, tmp_path):
    (tmp_path / "secret.md").write_text(SECRET)
    body = f"# Paths\n\nRead {tmp_path / 'secret.md'} and ../../secret.md and /etc/passwd first.\n"
    stocked.skills.import_folders(write_skill(tmp_path / "bad" / "a" / "b", "paths", "Points outside.", body))
    assert SECRET not in all_sources(stocked)
    assert [f["path"] for f in stocked.skills.get("paths").files] == ["SKILL.md"]


def test_an_export_never_writes_outside_its_folder(stocked, tmp_path):
    stocked.skills.import_folders(pdf_skill(tmp_path / "in"))
    with stocked.store.catalog.write() as conn:  # a tampered catalog row
        conn.execute("UPDATE skill_files SET path = '../../escaped.txt' WHERE path = 'scripts/fill.py'")
    with pytest.raises(SkillFolderError, match="not a plain path"):
        stocked.skills.export("pdf", tmp_path / "out")
    assert not (tmp_path / "escaped.txt").exists() and not (tmp_path / "out" / "pdf").exists()


def test_a_yaml_bomb_is_refused(stocked, tmp_path):
    bomb = "\n".join(['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
                     + [f'{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)}]'
                        for i in range(8)])
    write_skill(tmp_path / "bad", "bomb", "A bomb.", "Body\n", extra=bomb)
    assert "anchors or aliases" in skipped_reason(stocked, tmp_path / "bad")


def test_a_deeply_nested_frontmatter_is_refused(stocked, tmp_path):
    write_skill(tmp_path / "bad", "deep", "Deep.", "Body\n", extra="x: " + "[" * 3_000 + "]" * 3_000)
    assert "nested too deeply" in skipped_reason(stocked, tmp_path / "bad")


def test_a_huge_frontmatter_is_refused(stocked, tmp_path):
    write_skill(tmp_path / "bad", "huge", "Huge.", "Body\n", extra="padding: " + "x" * (70 << 10))
    assert "frontmatter over" in skipped_reason(stocked, tmp_path / "bad")


def test_binary_files_named_md(stocked, tmp_path):
    folder = tmp_path / "bad" / "binary"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_bytes(b"---\nname: binary\ndescription: x\n---\n\xff\xfe\x00\x00")
    assert "not UTF-8" in skipped_reason(stocked, folder)
    ok = write_skill(tmp_path / "bad2", "halfbinary", "Has a binary reference.", "# Text\n\nFine.\n",
                     files={"references/blob.md": b"\x00\x01\x02 binary"})
    report = stocked.skills.import_folders(ok)
    assert any("references/blob.md: named as text" in w for w in report.imported[0].warnings)
    assert [p.role for p in stocked.skills.get("halfbinary").parts] == ["section"]


def test_ten_thousand_files_are_refused(stocked, tmp_path):
    folder = write_skill(tmp_path / "bad", "many", "Many files.", "Body\n")
    (folder / "assets").mkdir()
    for i in range(10_000):
        (folder / "assets" / f"f{i}.txt").write_bytes(b"")
    assert f"more than {MAX_FILES} files" in skipped_reason(stocked, folder)


def test_a_body_of_ten_megabytes_is_refused(stocked, tmp_path):
    write_skill(tmp_path / "bad", "big", "Big body.", "word " * (2 << 20))
    assert f"(at most {MAX_SKILL_MD_BYTES})" in skipped_reason(stocked, tmp_path / "bad")


def test_names_made_of_control_characters(stocked, tmp_path):
    write_skill(tmp_path / "bad", '"\\x1b[2J\\x07evil"', "Control characters.", "Body\n", folder="ctl")
    assert "has the name" in skipped_reason(stocked, tmp_path / "bad")
    write_skill(tmp_path / "bad3", "0123456789abcdef", "Looks like a block id.", "Body\n")
    assert "form of a block id" in skipped_reason(stocked, tmp_path / "bad3")
    for number, name in enumerate(("deadbeef", "DEADBEEF", "CafE")):  # would shadow a block id's prefix
        write_skill(tmp_path / f"hex{number}", name, "Looks like an id's prefix.", "Body\n")
        assert "form of a block id" in skipped_reason(stocked, tmp_path / f"hex{number}")
    write_skill(tmp_path / "sol", "solution-capital-of-france", "Looks like a solution.", "Body\n")
    assert "verified solution's name" in skipped_reason(stocked, tmp_path / "sol")
    folder = write_skill(tmp_path / "bad2", "oddfile", "A file with an odd name.", "Body\n")
    (folder / "re\x1bf.md").write_text("text")
    report = stocked.skills.import_folders(folder)
    assert any("control characters" in w for w in report.imported[0].warnings)
    assert [f["path"] for f in stocked.skills.get("oddfile").files] == ["SKILL.md"]


def test_a_missing_description_or_unparseable_yaml_is_skipped_with_the_reason(stocked, tmp_path):
    write_skill(tmp_path / "a", "nodesc", None, "Body\n")
    assert "no description" in skipped_reason(stocked, tmp_path / "a")
    write_skill(tmp_path / "b", "badyaml", "ok", "Body\n", extra="tags: [unclosed, list\n  - : :")
    assert "not YAML" in skipped_reason(stocked, tmp_path / "b")
    folder = tmp_path / "c" / "nofront"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text("# Just markdown\n")
    assert "no YAML frontmatter" in skipped_reason(stocked, folder)


def test_lenient_where_the_validator_is_strict(stocked, tmp_path):
    folder = write_skill(tmp_path, "Other_Name", "Use this when: the user asks about colons", "Body\n", folder="colons")
    report = stocked.skills.import_folders(folder)
    warnings = report.imported[0].warnings
    assert any("differs from its folder" in w for w in warnings) and any("breaks the specification" in w for w in warnings)
    assert any("quoted" in w for w in warnings)
    assert stocked.skills.get("Other_Name").description == "Use this when: the user asks about colons"


def test_scanning_skips_git_and_node_modules_and_stops_at_its_depth(tmp_path):
    git_skill(tmp_path / "root" / ".git")
    git_skill(tmp_path / "root" / "node_modules")
    pdf_skill(tmp_path / "root" / "a" / "b")
    git_skill(tmp_path / "root" / "1" / "2" / "3" / "4" / "5" / "6" / "7")
    found = scan_for_skills([tmp_path / "root"])
    assert found.folders == [tmp_path / "root" / "a" / "b" / "pdf"]
    assert any("deeper than" in note for note in found.notes)


def test_deep_folders_inside_a_skill_are_left_out(tmp_path):
    folder = write_skill(tmp_path, "deep", "Deep.", "Body\n")
    deep = folder.joinpath(*[f"d{i}" for i in range(12)])
    deep.mkdir(parents=True)
    (deep / "x.txt").write_text("x")
    read = read_skill_folder(folder)
    assert [f.path for f in read.files] == ["SKILL.md"] and any("deeper than" in w for w in read.warnings)


def test_nothing_is_written_into_the_skill_folders(stocked, tmp_path):
    folder = pdf_skill(tmp_path / "in")
    before = sorted((p, p.stat().st_mtime_ns) for p in folder.rglob("*"))
    stocked.skills.import_folders(folder)
    assert sorted((p, p.stat().st_mtime_ns) for p in folder.rglob("*")) == before


def test_a_file_that_grows_while_the_folder_is_read_is_a_reason_not_a_bypass_of_the_bounds(stocked, tmp_path, monkeypatch):
    folder = write_skill(tmp_path / "bad", "grower", "A skill whose file grows.", "# Grow\n\nSee references.\n",
                         files={"references/log.md": "small\n"})
    real_open = os.open

    def growing_open(path, flags, *args, **kwargs):
        if str(path).endswith("log.md"):  # listed at 6 bytes, then it grows before it is read
            with open(path, "ab") as handle:
                handle.write(b"x" * (2 << 20))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", growing_open)
    with pytest.raises(SkillFolderError) as refused:
        read_skill_folder(folder, max_bytes=1 << 20)
    assert "changed while it was read" in refused.value.reason
    (folder / "references" / "log.md").write_text("small\n")
    assert "changed while it was read" in skipped_reason(stocked, folder)
    monkeypatch.setattr(os, "open", real_open)
    assert [s.name for s in stocked.skills.import_folders(folder).imported] == ["grower"]


def test_a_symlink_loop_and_a_link_to_the_root_are_left_out(stocked, tmp_path):
    folder = write_skill(tmp_path / "bad", "loopy", "A skill with link loops.", "# Loops\n\nNothing here.\n")
    os.symlink(folder / "a", folder / "b")
    os.symlink(folder / "b", folder / "a")
    os.symlink(folder, folder / "references")
    os.symlink("..", folder / "up")
    report = stocked.skills.import_folders(tmp_path / "bad")
    assert [s.name for s in report.imported] == ["loopy"]
    assert [f["path"] for f in stocked.skills.get("loopy").files] == ["SKILL.md"]
    assert {w.split(":")[0] for w in report.imported[0].warnings if "a link" in w} == {"a", "b", "references", "up"}


@pytest.mark.parametrize("raw, warned", [
    (b"[" * 100_000, "is not a JSON list"),  # nested past the parser's recursion
    (b"[" + b",".join([b'{"query": "q%d", "should_trigger": true}' % n for n in range(60_000)]) + b"]", "bytes, over"),
])
def test_an_eval_queries_file_too_deep_or_too_large_is_not_used_and_the_skill_imports(stocked, tmp_path, raw, warned):
    folder = write_skill(tmp_path / "bad", "evaly", "A skill with hostile eval queries.", "# Evals\n\nNone.\n",
                         files={"eval_queries.json": raw})
    report = stocked.skills.import_folders(folder)
    assert [s.name for s in report.imported] == ["evaly"]
    assert any(w.startswith("eval_queries.json") and warned in w for w in report.imported[0].warnings)
    keys = stocked.store.routing_keys(stocked.skills.get("evaly").parts[0].block_id)
    assert [k for k in keys if k["kind"] in ("example", "near_miss")] == []
    assert stocked.skills.eval_triggers("evaly") == []
