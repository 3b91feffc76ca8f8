"""A skill's negative eval queries as near misses, and the key policy of an import, on the fakes."""

from __future__ import annotations

import json

import pytest

from skillgraft.bundles.transfer import export_bundle, import_bundle
from skillgraft.errors import InputError
from skillgraft.memory import SkillMemory
from skillgraft.skills.trigger_evals import MAX_TRAINING_QUERIES, is_held_out
from skillgraft.skills.plan import DEFAULT_KEY_POLICY
from skillgraft.routing.near_misses import NEAR_MISS
from skillgraft.testing import FakeEmbedder, FakeEngine

from .skill_folders import git_skill, pdf_skill, write_skill

NEAR = "merge pdf files and pdf forms of the ledger invoices"
LEDGER_DESCRIPTION = "Keep the accounting ledger: book invoices and reconcile the ledger every month."


def training(candidates) -> list[str]:
    return [q for q in candidates if not is_held_out(q)]


def near_miss_query() -> str:
    """A wording of :data:`NEAR` that falls in the training part (so it becomes a near miss)."""
    return training(f"{NEAR} {word}" for word in ("now", "today", "please", "again", "first", "soon", "here"))[0]


def eval_file(near: list[str], positive: list[str] = ()) -> dict:
    items = [{"query": q, "should_trigger": True} for q in positive] + [{"query": q, "should_trigger": False} for q in near]
    return {"eval_queries.json": json.dumps(items)}


def pdf_with_near_miss(root, near=None):
    return write_skill(root, "pdf", "Read, fill and merge PDF files and PDF forms.", "# PDF\n\nMerge pdf files with pypdf.\n",
                       files=eval_file([near or near_miss_query()]))


def near_keys(memory, name="pdf") -> list[str]:
    return [k["text"] for p in memory.skills.get(name).parts for k in memory.store.routing_keys(p.block_id) if k["kind"] == NEAR_MISS]


def routed(memory, query):
    recall = memory.route(query)
    return memory.skills.of_block(recall.block_id) if recall.decision == "graft" else None


def test_a_near_miss_keeps_its_skill_out_and_the_next_skill_takes_its_place(fake_memory, tmp_path):
    query = near_miss_query()
    pdf_with_near_miss(tmp_path)
    write_skill(tmp_path, "ledger", LEDGER_DESCRIPTION, "# Ledger\n\nBook each invoice once.\n")
    fake_memory.skills.import_folders(tmp_path)
    assert near_keys(fake_memory) == [query]
    recall = fake_memory.route(query)
    assert fake_memory.skills.of_block(recall.block_id) == "ledger" and "'pdf' not offered: a near miss" in recall.reason
    assert "pdf" not in [fake_memory.skills.of_block(b) for b, _ in recall.candidates]
    # without the near miss the same query went to pdf: it is the near miss that moved it
    with SkillMemory(tmp_path / "plain", engine=FakeEngine(), embedder=FakeEmbedder()) as plain:
        write_skill(tmp_path / "p", "pdf", "Read, fill and merge PDF files and PDF forms.", "# PDF\n\nMerge pdf files with pypdf.\n")
        write_skill(tmp_path / "p", "ledger", LEDGER_DESCRIPTION, "# Ledger\n\nBook each invoice once.\n")
        plain.skills.import_folders(tmp_path / "p")
        assert plain.route(query).candidates[0][0] == plain.skills.get("pdf").parts[0].block_id


def test_alone_a_skill_kept_out_by_its_near_miss_leaves_an_abstention(fake_memory, tmp_path):
    pdf_with_near_miss(tmp_path)
    fake_memory.skills.import_folders(tmp_path)
    recall = fake_memory.route(near_miss_query())
    assert recall.decision == "abstain" and "no block is left to offer; 'pdf' not offered" in recall.reason


def test_a_near_miss_does_not_block_the_queries_that_are_nearer_the_skill(fake_memory, tmp_path):
    pdf_with_near_miss(tmp_path)
    fake_memory.skills.import_folders(tmp_path)
    assert routed(fake_memory, "read, fill and merge PDF files") == "pdf"
    assert routed(fake_memory, "fill PDF forms") == "pdf"


def test_near_misses_are_not_keys_that_attract_and_other_skills_route_as_before(fake_memory, tmp_path):
    queries = ["squash git commits", near_miss_query(), "interactive rebase of my commits", "merge pdf files"]
    git_skill(tmp_path / "with")
    pdf_with_near_miss(tmp_path / "with")
    git_skill(tmp_path / "without")
    write_skill(tmp_path / "without", "pdf", "Read, fill and merge PDF files and PDF forms.", "# PDF\n\nMerge pdf files with pypdf.\n")
    fake_memory.skills.import_folders(tmp_path / "with")
    with SkillMemory(tmp_path / "plain", engine=FakeEngine(), embedder=FakeEmbedder()) as plain:
        plain.skills.import_folders(tmp_path / "without")
        assert fake_memory.router.index().size == plain.router.index().size  # the near miss is no key of the index
        git = {m.skills.get("git-squash").parts[0].block_id for m in (fake_memory, plain)}
        assert len(git) == 1  # the same block in both stores
        for query in queries:
            mine = [(b, round(s, 6)) for b, s in fake_memory.router.scores([query])[0] if b in git]
            theirs = [(b, round(s, 6)) for b, s in plain.router.scores([query])[0] if b in git]
            assert mine == theirs
        assert routed(fake_memory, "squash git commits") == routed(plain, "squash git commits") == "git-squash"


def test_near_misses_are_capped_and_a_query_labelled_both_ways_is_none(fake_memory, tmp_path):
    many = training(f"bake sourdough bread number {i}" for i in range(200))
    long = training(f"{'x' * 2_100} {i}" for i in range(8))[0]
    both = training(f"merge the pdf pages {w}" for w in ("now", "today", "please", "again", "first", "soon", "here"))[0]
    items = eval_file([*many, long, both], positive=[both])
    write_skill(tmp_path, "pdf", "Merge PDF files.", "# PDF\n\nMerge pdf files.\n", files=items)
    report = fake_memory.skills.import_folders(tmp_path)
    keys = near_keys(fake_memory)
    assert len(keys) == MAX_TRAINING_QUERIES and keys == many[:MAX_TRAINING_QUERIES]
    assert long not in keys and both not in keys
    warnings = report.imported[0].warnings
    assert any("labelled both ways" in w for w in warnings) and any(f"the first {MAX_TRAINING_QUERIES} used" in w for w in warnings)


def test_near_misses_change_with_the_version_and_go_with_the_skill(fake_memory, tmp_path):
    folder = pdf_with_near_miss(tmp_path)
    fake_memory.skills.import_folders(tmp_path)
    other = training(f"convert a word document to pdf {w}" for w in ("now", "today", "please", "again", "first", "soon"))[0]
    (folder / "eval_queries.json").write_text(json.dumps([{"query": other, "should_trigger": False}]))
    report = fake_memory.skills.import_folders(tmp_path)
    assert report.imported[0].version == 2 and report.imported[0].reused == 1  # same text: the block is shared
    assert near_keys(fake_memory) == [other]  # and carries the new version's near misses
    fake_memory.skills.remove("pdf")
    assert fake_memory.store.key_vectors(NEAR_MISS) == []


def section_keys(memory, name="pdf") -> set:
    part = memory.skills.get(name).parts[0]
    return {(k["kind"], k["text"]) for k in memory.store.routing_keys(part.block_id) if k["kind"] == "manual"}


def test_the_key_policy_is_chosen_at_import_recorded_and_kept_by_update(fake_memory, tmp_path):
    folder = pdf_skill(tmp_path)
    fake_memory.skills.import_folders(tmp_path)
    assert fake_memory.skills.get("pdf").keys == DEFAULT_KEY_POLICY == "headings"
    assert section_keys(fake_memory) == {("manual", "pdf: PDF handling")}
    report = fake_memory.skills.import_folders(tmp_path, keys="sentences")
    assert report.imported[0].version == 2 and report.imported[0].reused == 2  # same blocks, other keys
    sentences = section_keys(fake_memory)
    assert ("manual", "Use pypdf to read pages and pdfplumber to pull tables out of a PDF file.") in sentences
    assert not any(text.startswith("#") for _, text in sentences)
    assert fake_memory.skills.import_folders(tmp_path).unchanged  # the recorded policy: nothing to do
    (folder / "SKILL.md").write_text((folder / "SKILL.md").read_text() + "\n## Splitting\n\nOne file per page of the input.\n")
    fake_memory.skills.update("pdf")
    assert fake_memory.skills.get("pdf").keys == "sentences" and ("manual", "One file per page of the input.") in section_keys(fake_memory)
    fake_memory.skills.import_folders(tmp_path, keys="description")
    assert fake_memory.skills.get("pdf").keys == "description" and section_keys(fake_memory) == set()
    with pytest.raises(InputError, match="unknown key policy"):
        fake_memory.skills.import_folders(tmp_path, keys="everything")


def test_a_bundle_carries_each_version_with_its_key_policy(fake_memory, tmp_path):
    pdf_skill(tmp_path / "in")
    fake_memory.skills.import_folders(tmp_path / "in", keys="sentences")
    export_bundle(fake_memory.store, tmp_path / "b.tar")
    with SkillMemory(tmp_path / "other", engine=FakeEngine(), embedder=FakeEmbedder()) as other:
        import_bundle(other, tmp_path / "b.tar")
        assert other.skills.get("pdf").keys == "sentences" and section_keys(other) == section_keys(fake_memory)


def test_a_skills_near_misses_written_as_other_skills_queries_never_keep_those_skills_out(fake_memory, tmp_path):
    taken = ["squash git commits", "squash my last commits into one", "merge pdf files", "read, fill and merge PDF files",
             "fill PDF forms", "Read, fill and merge PDF files and PDF forms."]
    variants = [f"{q} {word}".strip() for q in taken for word in ("", "now", "please", "today", "again")]
    spoiler = write_skill(tmp_path / "spoil", "spoiler", "Water the office plants on Mondays.", "# Plants\n\nWater them.\n",
                          files=eval_file(training(variants)[:MAX_TRAINING_QUERIES]))
    git_skill(tmp_path / "skills")
    pdf_skill(tmp_path / "skills")
    fake_memory.skills.import_folders(tmp_path / "skills")
    before = {query: routed(fake_memory, query) for query in variants}
    assert set(before.values()) <= {"git-squash", "pdf"} and len(set(before.values())) == 2
    fake_memory.skills.import_folders(spoiler)
    assert len(near_keys(fake_memory, "spoiler")) == min(len(training(variants)), MAX_TRAINING_QUERIES)
    assert {query: routed(fake_memory, query) for query in variants} == before
