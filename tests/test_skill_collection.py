"""The project's collection of Agent Skills (tests/data/agent_skills, see its README) imported
whole: on the fake engine (capture on the real model would take minutes) with the real encoder.

The fake's tokens are bytes, so its window is 16,384 of them: about what 4,096 tokens of a real
model hold for this prose, so the bodies that overflow a real 4,096-token window are the ones
split here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from skillgraft.core.answer import AnswerOptions
from skillgraft.memory import SkillMemory
from skillgraft.skills.importing import part_chars
from skillgraft.testing import FakeEngine

COLLECTION = Path(__file__).resolve().parent / "data" / "agent_skills"
HELD_OUT = COLLECTION.parent / "agent_skills_heldout.json"
LONG = {"dockerfile-hardening", "flaky-test-triage", "html-accessibility-audit"}  # the README's "long" bodies
RENAMED = {"python-packaging": "pyproject-packaging"}  # folder -> frontmatter name
N_CTX = 16_384


def folders() -> dict[str, Path]:
    """Stored name -> folder of every skill in the collection."""
    return {RENAMED.get(p.name, p.name): p for p in sorted(COLLECTION.iterdir()) if (p / "SKILL.md").is_file()}


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def import_copy(tmp_path, embedder):
    skills = tmp_path / "skills"
    shutil.copytree(COLLECTION, skills)
    memory = SkillMemory(tmp_path / "store", engine=FakeEngine(n_ctx=N_CTX), embedder=embedder)
    return memory, skills, memory.skills.import_folders(skills)


@pytest.fixture(scope="module")
def imported(tmp_path_factory, embedder):
    memory, skills, report = import_copy(tmp_path_factory.mktemp("collection"), embedder)
    with memory:
        yield memory, skills, report


def test_every_skill_is_stored_the_long_ones_split_their_references_child_blocks(imported):
    memory, _, report = imported
    expected = folders()
    assert len(expected) >= 15 and not report.skipped
    assert sorted(s.name for s in report.imported) == sorted(expected)
    assert any("'pyproject-packaging' differs from its folder" in w for s in report.imported for w in s.warnings)
    room = memory.engine.n_ctx // 2  # a part sits beside an app's prompt
    most = part_chars(memory.engine.n_ctx)
    split = set()
    for name, folder in expected.items():
        skill = memory.skills.get(name)
        sections = [p for p in skill.parts if p.role == "section"]
        if len(sections) > 1:
            split.add(name)
        assert all(0 < p.n_tokens <= room and len(memory.blocks.get(p.block_id).source) <= most for p in skill.parts), name
        references = sorted(p.relative_to(folder).as_posix() for p in (folder / "references").glob("*.md"))
        assert sorted({p.title for p in skill.parts if p.role == "resource"}) == references, name
        for part in skill.parts:
            if part.role == "resource":
                text = (folder / part.title).read_text(encoding="utf-8")
                assert memory.blocks.get(part.block_id).source.split("\n\n", 1)[1] in text
        assert skill.scripts == sorted(p.relative_to(folder).as_posix() for p in (folder / "scripts").glob("*"))
    assert split >= LONG
    for name in LONG:  # every word of the body kept, in order, across its blocks
        body = (expected[name] / "SKILL.md").read_text(encoding="utf-8").split("---\n", 2)[2]
        parts = [memory.blocks.get(p.block_id).source.split("\n\n", 1)[1] for p in memory.skills.get(name).parts if p.role == "section"]
        assert "".join(body.split()) == "".join("".join(parts).split())


def test_each_skill_is_reached_by_its_description_but_one_that_opts_out_never(imported):
    memory, _, _ = imported
    held_out = json.loads(HELD_OUT.read_text())
    for skill in memory.skills.list():
        recall = memory.route(skill.description)
        if skill.model_invocable:
            assert recall.decision == "graft" and memory.skills.of_block(recall.block_id) == skill.name
    assert [s.name for s in memory.skills.list() if not s.model_invocable] == ["release-notes"]
    asked = [item["query"] for item in held_out["in_scope"] if item["skill"] == "release-notes"]
    asked.append(memory.skills.get("release-notes").description)
    for query in asked:
        assert all(memory.skills.of_block(b) != "release-notes" for b, _ in memory.route(query).candidates)
    answer = memory.answer([("user", asked[0])], AnswerOptions(max_tokens=4), block="release-notes")
    assert answer.note.block_id == memory.skills.get("release-notes").parts[0].block_id  # by name it is grafted


def test_near_misses_keep_out_of_scope_queries_away_and_cost_no_in_scope_answer(imported):
    """The held-out queries (docs/routing.md): with the near misses of the skills' negative
    eval queries, no fewer out-of-scope queries are abstained on than without them (the
    skill-first router with lexical evidence abstains on most already), and about as many
    in-scope queries are answered right (a query or two won or lost)."""
    from skillgraft.routing.near_misses import NEAR_MISS

    memory, _, _ = imported
    held_out = json.loads(HELD_OUT.read_text())
    offered = [(i["query"], i["skill"]) for i in held_out["in_scope"] if i["skill"] != "release-notes"]
    stored = {b.id: [k for k in memory.store.routing_keys(b.id) if k["kind"] == NEAR_MISS] for b in memory.blocks.list()}
    stored = {b: rows for b, rows in stored.items() if rows}
    assert len({memory.skills.of_block(b) for b in stored}) == 13  # every skill with negatives in its training half

    def answers():
        routes = [(memory.route(q), skill) for q, skill in offered]
        right = [q for (r, skill), (q, _) in zip(routes, offered) if r.decision == "graft" and memory.skills.of_block(r.block_id) == skill]
        return right, sum(memory.route(q).decision == "abstain" for q in held_out["out_of_scope"])

    with_near = answers()
    try:
        for block_id in stored:
            memory.store.replace_routing_keys(block_id, [NEAR_MISS], [])
        without = answers()
    finally:
        for block_id, rows in stored.items():
            memory.store.add_routing_keys(block_id, rows)
    assert abs(len(with_near[0]) - len(without[0])) <= 2  # in scope: a query or two won or lost
    assert with_near[1] >= without[1] and with_near[1] >= 0.85 * len(held_out["out_of_scope"])


def test_a_second_import_is_a_no_op(imported):
    memory, skills, _ = imported
    blocks = {b.id for b in memory.blocks.list()}
    again = memory.skills.import_folders(skills)
    assert again.imported == [] and len(again.unchanged) == len(folders()) and not again.skipped
    assert {b.id for b in memory.blocks.list()} == blocks


def test_every_skill_exports_byte_for_byte(imported, tmp_path):
    memory, _, _ = imported
    for name, folder in folders().items():
        out = memory.skills.export(name, tmp_path)
        assert files_of(Path(out.folder)) == files_of(folder), name
    assert memory.skills.import_folders(tmp_path).imported == []  # the same manifests: nothing new


def test_an_edited_skill_becomes_a_new_version_and_the_earlier_is_kept(tmp_path, embedder):
    memory, skills, first = import_copy(tmp_path, embedder)
    with memory:
        v1 = memory.skills.get("regex-crafting")
        skill_md = skills / "regex-crafting" / "SKILL.md"
        skill_md.write_text(skill_md.read_text() + "\n## Unicode\n\nUse \\p{L} for letters where the engine has it.\n")
        report = memory.skills.import_folders(skills)
        assert [(s.name, s.version) for s in report.imported] == [("regex-crafting", 2)]
        assert len(report.unchanged) == len(folders()) - 1
        assert memory.skills.get("regex-crafting").default_version == 2 and memory.skills.get("regex-crafting").versions == [1, 2]
        kept = memory.skills.get("regex-crafting", 1)
        assert [p.block_id for p in kept.parts] == [p.block_id for p in v1.parts]
        assert all(memory.blocks.get(p.block_id).status == "ok" for p in kept.parts)
        sections = [p for p in memory.skills.get("regex-crafting").parts if p.role == "section"]
        assert memory.blocks.get(sections[-1].block_id).source.endswith("where the engine has it.")
        old = memory.skills.export("regex-crafting", tmp_path / "v1", version=1)
        assert files_of(Path(old.folder)) == files_of(COLLECTION / "regex-crafting")
        new = memory.skills.export("regex-crafting", tmp_path / "v2")
        assert files_of(Path(new.folder)) == files_of(skills / "regex-crafting")
        assert first.imported and memory.skills.import_folders(skills).imported == []
