"""Importing Agent Skills folders on the fakes: records, parts, keys, versions, routing, export."""

from __future__ import annotations

import pytest

from skillgraft.errors import InputError, SkillNotFoundError, StoreError
from skillgraft.memory import SkillMemory
from skillgraft.testing import FakeEmbedder, FakeEngine

from .skill_folders import FORMS, PDF_BODY, git_skill, pdf_skill, write_skill


@pytest.fixture
def small_memory(tmp_path):
    """A memory whose window holds 1,024 fake tokens (bytes): 768 for a block."""
    with SkillMemory(tmp_path / "store", engine=FakeEngine(n_ctx=1024), embedder=FakeEmbedder()) as mem:
        yield mem


def test_a_skill_folder_becomes_one_skill_with_its_record(fake_memory, tmp_path):
    pdf_skill(tmp_path / "skills")
    report = fake_memory.skills.import_folders(tmp_path / "skills" / "pdf")
    assert [s.name for s in report.imported] == ["pdf"] and not report.skipped
    skill = fake_memory.skills.get("pdf")
    assert skill.version == skill.default_version == 1 and skill.model_invocable
    assert skill.frontmatter["license"] == "Apache-2.0" and skill.frontmatter["metadata"] == {"author": "docs-team", "version": "1.2"}
    assert skill.frontmatter["allowed-tools"] == "Bash(python:*) Read" and skill.frontmatter["x-unknown-field"] == "kept"
    assert skill.scripts == ["scripts/fill.py"] and skill.assets == ["assets/logo.png"]
    assert [f["path"] for f in skill.files] == ["SKILL.md", "assets/logo.png", "references/forms.md", "scripts/fill.py"]
    assert [(p.role, p.title) for p in skill.parts] == [("section", "PDF handling"), ("resource", "references/forms.md")]
    body, resource = (fake_memory.blocks.get(p.block_id) for p in skill.parts)
    assert body.source.startswith(prefix_of(skill, "Section: PDF handling")) and body.source.endswith(PDF_BODY.strip())
    assert resource.source.endswith(FORMS.strip()) and "Resource: references/forms.md" in resource.source
    assert "never run" not in body.source + resource.source  # scripts are listed, not captured
    assert fake_memory.blocks.get("pdf").id == body.id


def prefix_of(skill, line: str) -> str:
    return f"Skill: {skill.name}\nDescription: {skill.description}\n{line}\n\n"


def test_the_description_is_the_key_and_the_body_gives_only_its_heading_path(fake_memory, tmp_path):
    pdf_skill(tmp_path)
    fake_memory.skills.import_folders(tmp_path / "pdf")
    body, resource = fake_memory.skills.get("pdf").parts
    keys = {(k["kind"], k["text"]) for k in fake_memory.store.routing_keys(body.block_id)}
    assert keys == {("name", "pdf"), ("description", "Read, fill and merge PDF files and PDF forms."),
                    ("manual", "pdf: PDF handling"), ("skill", "pdf: Read, fill and merge PDF files and PDF forms."),
                    ("headings", "PDF handling; Filling forms; Merging"),
                    ("lead", "Read, fill and merge PDF files and PDF forms.")}
    own = [k["text"] for k in fake_memory.store.routing_keys(resource.block_id)]
    assert "pdf references forms" in own and "Form fields" in own and any("Checkbox" in k for k in own)


def test_importing_again_is_a_no_op_and_a_change_is_a_new_default_version(fake_memory, tmp_path):
    folder = pdf_skill(tmp_path)
    first = fake_memory.skills.import_folders(tmp_path)
    blocks_before = {b.id for b in fake_memory.blocks.list()}
    again = fake_memory.skills.import_folders(tmp_path)
    assert again.imported == [] and again.unchanged == [{"name": "pdf", "version": 1, "folder": str(folder)}]
    assert {b.id for b in fake_memory.blocks.list()} == blocks_before
    (folder / "SKILL.md").write_text((folder / "SKILL.md").read_text() + "\n## Splitting\n\nWrite each page to its own file.\n")
    changed = fake_memory.skills.import_folders(tmp_path)
    assert [(s.name, s.version, s.reused) for s in changed.imported] == [("pdf", 2, 1)]  # the resource is shared
    assert fake_memory.skills.get("pdf").default_version == 2 and fake_memory.skills.get("pdf", 1).version == 1
    resource_v1 = fake_memory.skills.get("pdf", 1).parts[1].block_id
    assert fake_memory.skills.get("pdf", 2).parts[1].block_id == resource_v1
    assert blocks_before <= {b.id for b in fake_memory.blocks.list()}  # the earlier version is kept
    assert first.imported[0].blocks[0] not in fake_memory.skills.get("pdf").parts[0].block_id


def test_only_the_default_version_is_routed_and_removing_one_keeps_the_other(fake_memory, tmp_path):
    folder = pdf_skill(tmp_path)
    fake_memory.skills.import_folders(tmp_path)
    v1_body = fake_memory.skills.get("pdf").parts[0].block_id
    (folder / "SKILL.md").write_text((folder / "SKILL.md").read_text().replace("pdfplumber", "camelot"))
    fake_memory.skills.import_folders(tmp_path)
    v2_body = fake_memory.skills.get("pdf").parts[0].block_id
    query = "merge pdf files with PdfWriter pages"
    assert fake_memory.route(query).block_id == v2_body
    fake_memory.skills.set_default("pdf", 1)
    assert fake_memory.route(query).block_id == v1_body
    removed = fake_memory.skills.remove("pdf", 2)
    assert removed == [v2_body] and fake_memory.skills.get("pdf").versions == [1]
    assert fake_memory.route(query).block_id == v1_body
    fake_memory.skills.remove("pdf")
    assert fake_memory.blocks.list() == [] and fake_memory.skills.list() == []
    with pytest.raises(SkillNotFoundError):
        fake_memory.skills.get("pdf")


def test_routing_ranks_skills_not_their_blocks(small_memory, tmp_path):
    sections = "\n\n".join(f"## Step {i}\n\n" + f"Detail {i} of merging pdf pages with the writer. " * 12 for i in range(8))
    write_skill(tmp_path, "pdf", "Merge PDF files.", "# Merging\n\n" + sections)
    git_skill(tmp_path)
    small_memory.skills.import_folders(tmp_path)
    assert len(small_memory.skills.get("pdf").parts) > 3
    recall = small_memory.route("merge pdf pages with the writer")
    ranked = [small_memory.skills.of_block(block_id) for block_id, _ in recall.candidates]
    assert ranked[0] == "pdf" and ranked.count("pdf") == 1 and recall.runner_up == "git-squash"


def test_a_long_body_becomes_few_blocks_that_fit_each_knowing_its_section(small_memory, tmp_path):
    sections = [f"## Part {i}\n\n" + " ".join(f"Sentence {i}.{j} explains one step of the job." for j in range(6)) for i in range(9)]
    listing = "## Checklist\n\n" + "\n".join(f"- check item {i} before you ship the release" for i in range(60))
    body = "# Guide\n\n" + "\n\n".join(sections) + "\n\n" + listing + "\n"
    write_skill(tmp_path, "guide", "A long release guide.", body)
    small_memory.skills.import_folders(tmp_path)
    skill = small_memory.skills.get("guide")
    room = small_memory.engine.n_ctx - 256
    blocks = [small_memory.blocks.get(p.block_id) for p in skill.parts]
    assert all(b.n_tokens <= room for b in blocks) and len(blocks) >= 4
    assert any(p.title == "Guide > Checklist" for p in skill.parts)  # a list with no blank line, cut at lines
    texts = [b.source.split("\n\n", 1)[1] for b in blocks]
    assert all(not t.lstrip().startswith("#") or "\n" in t.strip() for t in texts)  # never a heading alone
    assert "".join(body.split()) == "".join("".join(texts).split())  # every word kept, in order
    total = sum(len(t) for t in texts)
    assert len(blocks) <= -(-total // (room - 150)) + 2  # packed: close to the fewest that can hold it


def test_a_skill_that_opts_out_of_model_invocation_is_stored_but_reached_by_name_only(fake_memory, tmp_path):
    write_skill(tmp_path, "deploy", "Deploy the service to production.", "# Deploy\n\nRun make deploy.\n",
                extra="disable-model-invocation: true")
    git_skill(tmp_path)
    fake_memory.skills.import_folders(tmp_path)
    assert not fake_memory.skills.get("deploy").model_invocable
    recall = fake_memory.route("deploy the service to production")
    assert recall.block_id != fake_memory.skills.get("deploy").parts[0].block_id
    assert all(fake_memory.skills.of_block(b) != "deploy" for b, _ in recall.candidates)
    assert fake_memory.blocks.get("deploy").name == "deploy"


def test_eval_queries_become_examples_of_the_first_block(fake_memory, tmp_path):
    write_skill(tmp_path, "git-squash", "Squash commits.", "# Squash\n\nUse rebase.\n", files={
        "eval_queries.json": '[{"query": "combine my last commits", "should_trigger": true},'
                             ' {"query": "bake bread", "should_trigger": false}]'})
    fake_memory.skills.import_folders(tmp_path)
    keys = fake_memory.store.routing_keys(fake_memory.skills.get("git-squash").parts[0].block_id)
    assert [k["text"] for k in keys if k["kind"] == "example"] == ["combine my last commits"]


def test_a_skill_is_one_thing_blocks_of_it_are_not_removed_or_edited_alone(fake_memory, tmp_path):
    pdf_skill(tmp_path)
    fake_memory.skills.import_folders(tmp_path)
    part = fake_memory.skills.get("pdf").parts[1].block_id
    with pytest.raises(InputError, match="part of skill 'pdf'"):
        fake_memory.blocks.delete(part)
    with pytest.raises(InputError, match="skills update pdf"):
        fake_memory.blocks.update(part, description="other")


def test_export_writes_the_folder_back_byte_for_byte(fake_memory, tmp_path):
    folder = pdf_skill(tmp_path / "in")
    fake_memory.skills.import_folders(folder)
    out = fake_memory.skills.export("pdf", tmp_path / "out")
    written = sorted(p.relative_to(out.folder).as_posix() for p in (tmp_path / "out" / "pdf").rglob("*") if p.is_file())
    assert written == sorted(out.files) == ["SKILL.md", "assets/logo.png", "references/forms.md", "scripts/fill.py"]
    for rel in written:
        assert (tmp_path / "out" / "pdf" / rel).read_bytes() == (folder / rel).read_bytes()
    assert fake_memory.skills.import_folders(tmp_path / "out").unchanged[0]["version"] == 1  # the same manifest
    with pytest.raises(InputError, match="exists already"):
        fake_memory.skills.export("pdf", tmp_path / "out")


def test_an_export_lists_what_the_reference_validator_refuses_and_keeps_it(fake_memory, tmp_path):
    from skillgraft.skills.frontmatter import spec_problems

    pdf_skill(tmp_path / "in")  # carries x-unknown-field
    git_skill(tmp_path / "in", folder="squash-folder")  # a name that is not its folder's
    fake_memory.skills.import_folders(tmp_path / "in")
    pdf = fake_memory.skills.export("pdf", tmp_path / "out")
    assert pdf.spec_problems == ["fields outside the specification: x-unknown-field"]
    git = fake_memory.skills.export("git-squash", tmp_path / "out")
    assert git.spec_problems == [] and git.folder.endswith("git-squash")  # the folder is named after the skill
    assert spec_problems("---\nname: Bad--Name\ndescription: d\ncompatibility: " + "x" * 501 + "\nallowed-tools: 3\n---\n", "bad") == [
        "the name 'Bad--Name' breaks the rules (lowercase letters, digits, single hyphens, 64 at most)",
        "the name 'Bad--Name' differs from the folder 'bad'",
        "compatibility is not text of 500 characters at most", "allowed-tools is neither text nor a list of text"]
    assert spec_problems("---\nname: ok\ndescription: " + "d" * 1025 + "\n---\n", "ok") == [
        "the description is 1025 characters (1024 at most)"]
    assert spec_problems("---\nname: ok\n---\n", "ok") == ["no description"]
    assert spec_problems("no frontmatter", "ok") == ["has no YAML frontmatter (a first line ---)"]


def test_changed_and_vanished_folders_are_told_and_pruned_only_when_asked(fake_memory, tmp_path):
    pdf = pdf_skill(tmp_path)
    git = git_skill(tmp_path)
    fake_memory.skills.import_folders(tmp_path)
    assert fake_memory.skills.changes() == []
    (pdf / "references" / "forms.md").write_text("changed\n")
    for path in sorted(git.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    git.rmdir()
    changes = {c["name"]: c for c in fake_memory.skills.changes()}
    assert changes["pdf"]["change"] == "changed" and changes["pdf"]["files"] == ["references/forms.md"]
    assert changes["git-squash"]["change"] == "vanished"
    report = fake_memory.skills.import_folders(tmp_path)
    assert report.vanished == [{"name": "git-squash", "folder": str(git.resolve()), "removed": False}]
    assert "git-squash" in fake_memory.store.skill_names()
    pruned = fake_memory.skills.import_folders(tmp_path, prune=True)
    assert pruned.vanished[0]["removed"] and "git-squash" not in fake_memory.store.skill_names()
    assert fake_memory.skills.get("pdf").version == 2


def test_update_rereads_the_folder_with_its_frontmatter(fake_memory, tmp_path):
    folder = pdf_skill(tmp_path)
    fake_memory.skills.import_folders(folder)
    text = (folder / "SKILL.md").read_text().replace("Read, fill and merge", "Split, fill and merge")
    (folder / "SKILL.md").write_text(text)
    report = fake_memory.skills.update("pdf")
    assert report.imported[0].version == 2
    skill = fake_memory.skills.get("pdf")
    assert skill.description.startswith("Split") and all(
        fake_memory.blocks.get(p.block_id).source.startswith("Skill: pdf\nDescription: Split") for p in skill.parts)


@pytest.mark.parametrize("write", ["put_texts", "add_skill_version"])
def test_a_failing_store_write_leaves_nothing_behind_and_keeps_what_was_stored(fake_memory, tmp_path, monkeypatch, write):
    folder = pdf_skill(tmp_path)
    fake_memory.skills.import_folders(folder)
    before = {b.id for b in fake_memory.blocks.list()}
    (folder / "SKILL.md").write_text((folder / "SKILL.md").read_text() + "\nMore text.\n")
    (folder / "references" / "forms.md").write_text(FORMS + "\nMore forms.\n")

    def failing(*args, **kwargs):  # the blocks' write, or the version's after the blocks were written
        raise StoreError("the disk is full")

    monkeypatch.setattr(fake_memory.store, write, failing)
    report = fake_memory.skills.import_folders(folder)
    assert report.imported == [] and "the disk is full" in report.skipped[0]["reason"]
    assert {b.id for b in fake_memory.blocks.list()} == before and fake_memory.skills.get("pdf").versions == [1]


def test_an_import_runs_no_model_and_stores_text_blocks(fake_memory, tmp_path, monkeypatch):
    def no_model(*args, **kwargs):
        raise AssertionError("an import ran the model")

    for name in ("capture", "prefill", "tokenize"):
        monkeypatch.setattr(fake_memory.engine, name, no_model)
    report = fake_memory.skills.import_folders(pdf_skill(tmp_path))
    monkeypatch.undo()
    assert [s.name for s in report.imported] == ["pdf"] and not report.skipped
    blocks = [fake_memory.blocks.get(p.block_id) for p in fake_memory.skills.get("pdf").parts]
    assert blocks and all(b.text_only and b.n_bytes == 0 and not b.tokens for b in blocks)
    assert fake_memory.blocks.check().ok


def test_the_first_root_wins_a_name_collision(fake_memory, tmp_path):
    git_skill(tmp_path / "project")
    write_skill(tmp_path / "user", "git-squash", "Another squash skill.", "# Other\n\nText.\n")
    report = fake_memory.skills.import_folders([tmp_path / "project", tmp_path / "user"])
    assert [s.folder for s in report.imported] == [str(tmp_path / "project" / "git-squash")]
    assert any("shadowed" in w for w in report.warnings)
    assert fake_memory.skills.get("git-squash").description.startswith("Squash several")


def test_a_name_held_by_a_plain_manual_is_not_taken_over(fake_memory, tmp_path):
    fake_memory.add_manual("git-squash", "Some manual about squashing commits with git rebase.")
    git_skill(tmp_path)
    report = fake_memory.skills.import_folders(tmp_path)
    assert report.imported == [] and "not an imported skill" in report.skipped[0]["reason"]
    assert [b.name for b in fake_memory.blocks.list()] == ["git-squash"]


def test_a_skills_text_serves_another_runtime_unchanged(tmp_path):
    pdf_skill(tmp_path / "skills")
    with SkillMemory(tmp_path / "store", engine=FakeEngine(), embedder=FakeEmbedder()) as memory:
        memory.skills.import_folders(tmp_path / "skills")
        before = [p.block_id for p in memory.skills.get("pdf").parts]
        with pytest.raises(InputError, match="named after the skill"):
            memory.blocks.rename(before[1], "other")
        memory.add_manual("other", "A plain manual captured under the first runtime.")
    with SkillMemory(tmp_path / "store", engine=FakeEngine("other-model"), embedder=FakeEmbedder()) as memory:
        report = memory.blocks.recapture()
        assert len(report.recaptured) == 1 and set(before) <= set(report.unchanged) and not report.failed
        assert [p.block_id for p in memory.skills.get("pdf").parts] == before
        routed = memory.route("merge pdf files with PdfWriter")
        assert memory.skills.of_block(routed.block_id) == "pdf"
        answer = memory.answer([("user", "merge pdf files with PdfWriter")])
        assert answer.note.decision == "graft" and answer.note.block_id == routed.block_id


def _queries(candidates, held_out: bool) -> list[str]:
    from skillgraft.skills.trigger_evals import is_held_out

    return [q for q in candidates if is_held_out(q) == held_out]


def test_eval_queries_report_trigger_precision_and_recall_on_the_held_out_part(fake_memory, tmp_path):
    import json

    git_words = [f"squash git commits with interactive rebase {w}" for w in ("now", "today", "please", "quickly", "again",
                                                                              "safely", "first", "later", "here", "soon")]
    pdf_words = [f"merge pdf files with PdfWriter pages {w}" for w in ("now", "today", "please", "quickly", "again",
                                                                        "safely", "first", "later", "here", "soon")]
    held_pos, train_pos = _queries(git_words, True), _queries(git_words, False)
    held_neg = _queries(pdf_words, True)
    assert held_pos and train_pos and held_neg
    mislabeled = held_pos[0]
    queries = ([{"query": q, "should_trigger": True} for q in held_pos[1:] + train_pos]
               + [{"query": q, "should_trigger": False} for q in held_neg + [mislabeled]])
    git_skill(tmp_path, files={"eval_queries.json": json.dumps(queries)})
    pdf_skill(tmp_path)
    fake_memory.skills.import_folders(tmp_path)
    examples = [k["text"] for k in fake_memory.store.routing_keys(fake_memory.skills.get("git-squash").parts[0].block_id)
                if k["kind"] == "example"]
    assert examples == train_pos  # only the training part's positives are keys
    [score] = fake_memory.skills.eval_triggers()
    assert (score.name, score.positives, score.negatives) == ("git-squash", len(held_pos) - 1, len(held_neg) + 1)
    assert score.true_positives == len(held_pos) - 1 and score.recall == 1.0
    assert score.false_positives == 1 and score.misses == [
        {"query": mislabeled, "should_trigger": False, "routed_to": "git-squash"}]
    [everything] = fake_memory.skills.eval_triggers("git-squash", held_out_only=False)
    assert everything.positives == len(held_pos) - 1 + len(train_pos)


def test_two_equal_pieces_of_a_resource_are_one_block_of_the_skill(small_memory, tmp_path):
    paragraph = "Fill in the title, the author and the date of the document before you send it. " * 6
    write_skill(tmp_path, "templates", "Document templates.", "# Templates\n\nPick one.\n",
                files={"references/form.md": f"{paragraph}\n\n{paragraph}\n"})
    report = small_memory.skills.import_folders(tmp_path)
    assert not report.skipped and report.imported[0].reused == 1
    parts = small_memory.skills.get("templates").parts
    assert [p.title for p in parts[1:]] == ["references/form.md"] * 2 and parts[1].block_id == parts[2].block_id


def test_calibration_counts_any_block_of_the_named_skill_as_right(small_memory, tmp_path):
    sections = "\n\n".join(f"## Step {i}\n\n" + f"Detail {i} of merging pdf pages with the writer. " * 12 for i in range(8))
    write_skill(tmp_path, "pdf", "Merge PDF files.", "# Merging\n\n" + sections)
    git_skill(tmp_path)
    small_memory.skills.import_folders(tmp_path)
    queries = [("detail 7 of merging pdf pages", "pdf"), ("merge pdf files", "pdf"), ("squash git commits", "git-squash")]
    first = small_memory.skills.get("pdf").parts[0].block_id
    assert any(small_memory.router.rankings([q])[0].scored[0][0] != first for q, s in queries if s == "pdf")
    report = small_memory.calibrate(queries, ["who won the world cup in 1998"], save=False)
    assert report.in_scope_accuracy == 1.0
