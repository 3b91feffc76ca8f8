"""Agent Skills folders end to end on the embedded model and the real encoder: import, split,
route, graft, and the CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from skillgraft.cli.main import cli

from .unit.skill_folders import git_skill, pdf_skill, write_skill

pytestmark = pytest.mark.model  # the CLI test loads the embedded model itself


@pytest.fixture(scope="module")
def small_engine():
    """SmolLM2 with a 1,024-token window, so a modest body needs several blocks."""
    from skillgraft.config import EngineSettings
    from skillgraft.engine.llama import Engine

    with Engine("smollm2-135m", EngineSettings(n_ctx=1024)) as engine:
        yield engine


def test_import_route_and_graft_a_split_skill(tmp_path, small_engine, embedder):
    from skillgraft.memory import SkillMemory

    steps = "\n\n".join(
        f"## Step {i}: {topic}\n\n" + " ".join(f"For {topic}, check item {j} of the list before you go on." for j in range(12))
        for i, topic in enumerate(["tables", "images", "fonts", "page sizes"], 1)
    )
    write_skill(tmp_path / "skills", "pdf-layout", "Lay out PDF pages: tables, images, fonts and page sizes.",
                "# PDF layout\n\n" + steps + "\n", files={"references/fonts.md": "# Fonts\n\nEmbed every font you use.\n"})
    git_skill(tmp_path / "skills")
    with SkillMemory(tmp_path / "store", engine=small_engine, embedder=embedder) as memory:
        report = memory.skills.import_folders(tmp_path / "skills")
        assert sorted(s.name for s in report.imported) == ["git-squash", "pdf-layout"] and not report.skipped
        skill = memory.skills.get("pdf-layout")
        sections = [p for p in skill.parts if p.role == "section"]
        assert len(sections) >= 2 and all(p.n_tokens <= small_engine.n_ctx - 256 for p in skill.parts)
        assert [p.title for p in skill.parts if p.role == "resource"] == ["references/fonts.md"]
        assert memory.skills.import_folders(tmp_path / "skills").imported == []  # a second import is a no-op

        recall = memory.route("how do I squash my last three git commits into one?")
        assert recall.decision == "graft" and memory.skills.of_block(recall.block_id) == "git-squash"
        layout = memory.route("which page sizes and fonts should my PDF layout use?")
        assert memory.skills.of_block(layout.block_id) == "pdf-layout"
        answer = memory.generate("which page sizes and fonts should my PDF layout use?", max_tokens=4)
        assert answer.decision in ("graft", "fallback") and answer.block_id == layout.block_id
        assert answer.prefill_tokens_avoided == memory.blocks.get(layout.block_id).n_tokens


def test_the_cli_imports_lists_shows_and_exports(runner, home, tmp_path):
    pdf_skill(tmp_path / "skills")
    imported = runner.invoke(cli, ["skills", "import", str(tmp_path / "skills"), "--json"])
    assert imported.exit_code == 0, imported.output
    assert [s["name"] for s in json.loads(imported.stdout)["imported"]] == ["pdf"]
    listed = json.loads(runner.invoke(cli, ["skills", "list", "--json"]).stdout)["rows"]
    assert [(r["name"], r["version"], r["blocks"]) for r in listed] == [("pdf", 1, 2)]
    shown = runner.invoke(cli, ["skills", "show", "pdf"])
    assert "frontmatter license: Apache-2.0" in shown.output and "references/forms.md" in shown.output
    exported = runner.invoke(cli, ["skills", "export", "pdf", str(tmp_path / "out"), "--json"])
    assert exported.exit_code == 0, exported.output
    assert (tmp_path / "out" / "pdf" / "SKILL.md").read_bytes() == (tmp_path / "skills" / "pdf" / "SKILL.md").read_bytes()
    (tmp_path / "skills" / "pdf" / "SKILL.md").write_text("---\nname: pdf\ndescription: Changed.\n---\nNew body.\n")
    check = json.loads(runner.invoke(cli, ["check", "--json"]).stdout)
    assert check["ok"] and [c["change"] for c in check["skills_changed"]] == ["changed"]
    status = runner.invoke(cli, ["skills", "status"])
    assert status.exit_code == 1 and "changed" in status.output
    removed = runner.invoke(cli, ["skills", "rm", "pdf", "--json"])
    assert removed.exit_code == 0 and len(json.loads(removed.stdout)["removed_blocks"]) == 2


COLLECTION = Path(__file__).resolve().parent / "data" / "agent_skills"


@pytest.mark.slow
def test_skills_of_the_collection_import_route_and_graft_on_the_model(tmp_path, smollm2, embedder):
    """Two short skills of the collection and one with a reference, on the default window."""
    from skillgraft.core.answer import AnswerOptions
    from skillgraft.core.chat_layout import skill_prompt
    from skillgraft.memory import SkillMemory

    for name in ("regex-crafting", "slide-deck-outline", "pdf-form-filling"):
        shutil.copytree(COLLECTION / name, tmp_path / "skills" / name)
    held_out = json.loads((COLLECTION.parent / "agent_skills_heldout.json").read_text())["in_scope"]
    with SkillMemory(tmp_path / "store", engine=smollm2, embedder=embedder) as memory:
        report = memory.skills.import_folders(tmp_path / "skills")
        assert sorted(s.name for s in report.imported) == ["pdf-form-filling", "regex-crafting", "slide-deck-outline"]
        pdf = memory.skills.get("pdf-form-filling")
        roles = [(p.role, p.title) for p in pdf.parts]
        sections = [title for role, title in roles if role == "section"]
        assert roles[: len(sections)] == [("section", t) for t in sections] and sections[0] == "Filling PDF forms"
        assert {title for role, title in roles if role == "resource"} == {"references/FORMS.md"}
        assert all(memory.blocks.get(p.block_id).text_only for s in report.imported for p in memory.skills.get(s.name).parts)
        routed = []
        for item in held_out:
            if item["skill"] in {s.name for s in report.imported}:
                recall = memory.route(item["query"])
                assert recall.decision == "abstain" or memory.skills.of_block(recall.block_id) == item["skill"], item  # no misroute
                routed.append(recall.decision == "graft")
        assert sum(routed) > len(routed) / 2
        query = "which fields does this insurance claim pdf have? I want to automate completing it"
        recall = memory.route(query)
        answer = memory.generate(query, max_tokens=4)
        assert answer.decision in ("graft", "fallback") and answer.block_id == recall.block_id
        block = memory.blocks.get(recall.block_id)
        mark = skill_prompt(smollm2, block.source, [("user", query)])[1]
        again = memory.answer([("user", query + " please")], AnswerOptions(max_tokens=4), block=block.id)
        assert again.note.cache_n >= mark  # the skill's cells, made on first use, are reused
        forms = next(p for p in pdf.parts if p.role == "resource")
        asked = memory.answer([("user", "what do the /Ff flag bits of a PDF form field mean?")], AnswerOptions(max_tokens=4),
                              block=forms.block_id)  # the reference, grafted on demand
        assert asked.note.decision in ("graft", "fallback") and asked.note.block_id == forms.block_id


@pytest.mark.slow
def test_the_cli_answers_a_skills_evals_with_and_without_it(runner, home, tmp_path):
    """evals/evals.json of one collection skill answered on the embedded model: the report's
    shape, and the with-skill prompt longer than the plain one by the grafted block."""
    shutil.copytree(COLLECTION / "sql-migration-review", tmp_path / "skills" / "sql-migration-review")
    imported = runner.invoke(cli, ["skills", "import", str(tmp_path / "skills"), "--json"])
    assert imported.exit_code == 0, imported.output
    result = runner.invoke(cli, ["skills", "eval", "sql-migration-review", "--max-tokens", "24", "--json"])
    assert result.exit_code == 0, result.output
    [report] = json.loads(result.stdout)["answers"]
    assert (report["name"], report["max_tokens"], len(report["evals"]), report["skipped"]) == (
        "sql-migration-review", 24, 3, [])
    assert [len(e["checks"]) for e in report["evals"]] == [1, 0, 2]
    assert [len(e["unchecked"]) for e in report["evals"]] == [4, 3, 2]
    for number, item in enumerate(report["evals"]):
        grafted, plain = item["with_skill"], item["without_skill"]
        assert not grafted["error"] and not plain["error"]
        assert grafted["decision"] == "graft" and grafted["block_id"] == report["block_id"]
        assert plain["decision"] == "abstain" and plain["block_id"] is None
        # the skill's cells are made on its first use and reused after
        assert grafted["reused_tokens"] >= report["block_tokens"] or number == 0
        # the same prompt after the block as alone, give or take the template's own system turn
        assert abs(grafted["prompt_tokens"] - report["block_tokens"] - plain["prompt_tokens"]) <= 40
        for run in (grafted, plain):
            assert 0 < run["generated_tokens"] <= 24 and run["generate_s"] > 0 and run["prefill_s"] > 0
            assert len(run["results"]) == len(item["checks"]) and run["checked"] <= len(item["checks"])
            assert 0 < run["ttft_s"] <= run["total_s"]
    summary = report["summary"]
    assert summary["with_skill"]["checks"] == summary["without_skill"]["checks"] == 3
    assert summary["delta"]["prompt_tokens"] > report["block_tokens"] - 40 and summary["unchecked"] == 9
    assert summary["with_skill"]["evals"]["n"] == summary["without_skill"]["evals"]["n"] == 2  # evals 1 and 3 checked
    # any chat GGUF by path: here the embedded model's file under another name
    from skillgraft.engine.models import resolve_model

    (tmp_path / "models").mkdir()
    by_path = tmp_path / "models" / "my-model.gguf"
    by_path.symlink_to(resolve_model("smollm2-135m")[1])
    text = runner.invoke(cli, ["skills", "eval", "sql-migration-review", "--limit", "1", "--max-tokens", "8",
                               "--model", str(by_path)])
    assert text.exit_code == 0 and "with     graft" in text.output and "without  abstain" in text.output
    assert f"answered by {by_path} with block" in text.output and "median first token" in text.output


AGENT_PROMPT = (
    "You are a coding agent working inside the user's repository. You read files, run commands and edit code "
    "through the tools you are given, one call at a time, and you explain what you changed in a few plain sentences. "
    "Follow the repository's own conventions: its formatter, its test layout, its naming. Never invent a file's "
    "contents: read it first. Prefer small, reviewable changes; run the tests after each change and report failures "
    "exactly as they were printed. Ask before deleting anything the user did not mention. "
) * 8
AGENT_TOOLS = [
    {"type": "function", "function": {"name": name, "description": f"{name.replace('_', ' ')} in the repository",
                                      "parameters": {"type": "object", "properties": {"path": {"type": "string"},
                                                                                      "text": {"type": "string"}},
                                                     "required": ["path"]}}}
    for name in ("read_file", "write_file", "list_folder", "run_command", "search_code", "apply_patch")
]


def test_an_agents_long_prompt_and_tools_never_fail_because_of_any_skill_part(tmp_path, smollm2, embedder):
    """Every part of the collection forced behind a ~1.3k-token agent prompt with six tools on
    the default window: each either sits after the app's prompt or is left out with its reason,
    and a chat the model alone can answer is never refused because of a skill."""
    from skillgraft.core.answer import AnswerOptions
    from skillgraft.core.chat_layout import chat_tokens
    from skillgraft.core.pipeline import AnswerPipeline
    from skillgraft.core.planning import forced_recall
    from skillgraft.core.tools import output_format
    from skillgraft.memory import SkillMemory

    shutil.copytree(COLLECTION, tmp_path / "skills")
    chat = [("system", AGENT_PROMPT), ("user", "Our CI is red since this morning; find out why and fix it.")]
    options = AnswerOptions(max_tokens=256, format=output_format(AGENT_TOOLS))
    with SkillMemory(tmp_path / "store", engine=smollm2, embedder=embedder) as memory:
        memory.skills.import_folders(tmp_path / "skills")
        pipeline = AnswerPipeline(smollm2)
        app = len(chat_tokens(smollm2, options.format.lead(chat)))
        assert app > 1200
        placed, left_out = 0, []
        parts = [p.block_id for s in memory.skills.list() for p in s.parts]
        assert len(parts) > 40
        for block_id in parts:
            recall = forced_recall(memory.blocks.get(block_id), memory.router.threshold, "every part, in turn")
            plan = memory.plan(chat, recall=recall, format=options.format)
            prompt = pipeline.prompt(plan, options)
            assert len(prompt.tokens) + 256 <= smollm2.n_ctx
            if prompt.grafted:
                placed += 1
            else:
                left_out.append(prompt.reason)
                assert "answered without it" in prompt.reason and len(prompt.tokens) == app
        assert placed >= len(parts) * 0.9, left_out
        largest = max(parts, key=lambda b: len(memory.blocks.get(b).source))
        answer = memory.answer(chat, AnswerOptions(max_tokens=4, format=options.format), block=largest)
        assert answer.note.decision in ("graft", "fallback") and answer.end.prompt_tokens + 4 <= smollm2.n_ctx


def test_warming_a_skill_on_the_model_is_what_its_first_use_would_make(tmp_path, smollm2, embedder):
    """``warm_skills`` on the embedded model, behind an app's stored prefix: the state it keeps
    serves the next request with that system prompt (restored, not prefilled), and that answer
    is the one a plain prefill of the same chat gives."""
    from skillgraft.core.answer import AnswerOptions
    from skillgraft.memory import SkillMemory

    shutil.copytree(COLLECTION / "regex-crafting", tmp_path / "skills" / "regex-crafting")
    system = "You are a careful assistant for a small team. Answer in two sentences at most. " * 3
    with SkillMemory(tmp_path / "store", engine=smollm2, embedder=embedder) as memory:
        memory.skills.import_folders(tmp_path / "skills")
        memory.apps.add("team", system)
        report = memory.skills.warm(["regex-crafting"], app="team")
        assert report.warmed and not report.left_out
        first = report.warmed[0]
        block = memory.blocks.get(first["block_id"])
        memory.answer([("user", "hello")], AnswerOptions(max_tokens=2), route=False)  # the cells turn elsewhere
        chat = [("system", system), ("user", "Write a regex for an ISO date.")]
        answer = memory.answer(chat, AnswerOptions(max_tokens=6), block=block.id)
        assert answer.note.reused_from == "derived" and answer.note.cache_n >= first["tokens"]
        plain = memory.answer([("system", system), ("system", block.source), chat[1]], AnswerOptions(max_tokens=6),
                              route=False)
        assert [s.token for s in plain.end.steps] == [s.token for s in answer.end.steps]


def test_a_pinned_skills_states_outlive_eviction_on_the_model(tmp_path, smollm2, embedder):
    """A pinned skill's states stay when the budget is reached; another skill's state that does
    not fit beside them is not kept (and said so), and the pinned state still serves its app."""
    from skillgraft.core.answer import AnswerOptions
    from skillgraft.memory import SkillMemory

    pdf_skill(tmp_path / "skills")
    git_skill(tmp_path / "skills")
    system = "You are a careful assistant for a small team. Answer in two sentences at most. " * 3
    with SkillMemory(tmp_path / "store", engine=smollm2, embedder=embedder) as memory:
        memory.skills.import_folders(tmp_path / "skills")
        warmed = memory.skills.warm(["pdf"], system=system).warmed
        pinned = memory.skills.pin("pdf").pinned_bytes
        assert warmed and pinned > 0
    budget = pinned + (1 << 20)  # less than any state of a skill behind this prompt
    with SkillMemory(tmp_path / "store", engine=smollm2, embedder=embedder, derived_bytes=budget) as memory:
        report = memory.skills.warm(["git-squash"], system=system)
        assert not report.warmed and "pinned" in report.left_out[0]["reason"]
        cache = memory.skills.cache()
        pdf = next(row for row in cache.skills if row.name == "pdf")
        assert pdf.pinned and pdf.n_bytes == pinned and cache.used <= budget
        chat = [("system", system), ("user", "How do I merge two PDF files?")]
        answer = memory.answer(chat, AnswerOptions(max_tokens=4), block=warmed[0]["block_id"])
        assert answer.note.reused_from == "derived" and answer.note.cache_n >= warmed[0]["tokens"]
