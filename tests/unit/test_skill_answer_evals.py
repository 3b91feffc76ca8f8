"""``evals/evals.json`` of a skill: read leniently (bad evals and assertions skipped with the
reason, caps on everything), checked only where an expectation is machine-checkable, and
answered with the skill grafted and without through the answer pipeline (fake engine)."""

from __future__ import annotations

import json

import pytest

from skillgraft.cli.main import cli
from skillgraft.errors import InputError, SkillNotFoundError
from skillgraft.skills.eval_cases import (
    EVALS_JSON, MAX_ASSERTIONS, MAX_EVALS, MAX_EVALS_BYTES, MAX_PROMPT_CHARS, Check, file_reference, read_evals,
)

from .skill_folders import git_skill, pdf_skill, write_skill

STORED = {"evals/files/a.csv": {"size": 3, "sha256": "ab" * 32}}


def evals_json(*evals, skill_name="git-squash") -> bytes:
    return json.dumps({"skill_name": skill_name, "evals": list(evals)}).encode()


def test_assertions_are_sorted_into_checks_unchecked_and_invalid():
    [case] = read_evals(evals_json({"id": 1, "prompt": "squash", "assertions": [
        "The answer uses an interactive rebase",
        {"contains": "rebase -i"}, {"not_contains": "merge", "ignore_case": True, "text": "no merge"},
        {"regex": r"HEAD~\d+"}, {"text": "graded elsewhere", "passed": True, "evidence": "..."},
        42, None, ["contains", "x"], "", {"contains": ""}, {"contains": "a", "regex": "b"}, {"regex": "(?=x)"},
        {"contains": "a", "ignore_case": "yes"}, {"contains": "a", "weight": 2}, {"passed": True},
        {"contains": "x" * 1_001},
    ]}), {}).cases
    assert [(c.kind, c.value, c.index) for c in case.checks] == [
        ("contains", "rebase -i", 1), ("not_contains", "merge", 2), ("regex", r"HEAD~\d+", 3)]
    assert case.checks[1].ignore_case and case.checks[1].text == "no merge"
    assert case.unchecked == ["The answer uses an interactive rebase", "graded elsewhere"]
    reasons = {i["index"]: i["reason"] for i in case.invalid}
    assert sorted(reasons) == list(range(5, 16))
    assert "got int" in reasons[5] and "got NoneType" in reasons[6] and "got list" in reasons[7]
    assert "empty" in reasons[8] and "non-empty string" in reasons[9] and "one check per assertion" in reasons[10]
    assert "regex refused" in reasons[11] and "ignore_case" in reasons[12] and "unknown keys weight" in reasons[13]
    assert "no text" in reasons[14] and "1,001 characters" in reasons[15]


def test_expectations_and_assertions_are_both_read():
    [case] = read_evals(evals_json({"prompt": "p", "expectations": ["one"], "assertions": [{"contains": "two"}]}), {}).cases
    assert case.unchecked == ["one"] and [c.value for c in case.checks] == ["two"]
    assert case.id is None and case.label == "#1"


def test_expected_output_is_checked_only_when_marked_exact():
    plain, exact, broken = read_evals(evals_json(
        {"prompt": "p", "expected_output": "A report"},
        {"prompt": "q", "expected_output": "4", "expected_output_exact": True},
        {"prompt": "r", "expected_output_exact": "yes"},
    ), {}).cases
    assert plain.checks == [] and plain.unchecked == []
    assert [(c.kind, c.value) for c in exact.checks] == [("exact", "4")]
    assert exact.checks[0].run("  4\n") == (True, "") and exact.checks[0].run("4.") == (False, "")
    assert "true or false" in broken.invalid[0]["reason"]


def test_checks_read_the_answer_and_an_undecidable_search_says_why():
    assert Check("contains", "Rebase", ignore_case=True).run("use git rebase") == (True, "")
    assert Check("not_contains", "merge").run("use git rebase") == (True, "")
    assert Check("not_contains", "rebase").run("use git rebase") == (False, "")
    [case] = read_evals(evals_json({"prompt": "p", "assertions": [{"regex": "a{0,100}a{0,100}a{0,100}b"}]}), {}).cases
    passed, why = case.checks[0].run("a" * 20_000)
    assert passed is None and "steps" in why


@pytest.mark.parametrize("raw,warning", [
    (b"\xff\xfe", "not valid JSON"), (b"[1, 2]", 'an "evals" list'), (b'{"evals": {}}', 'an "evals" list'),
    (b"[" * 100_000, "not valid JSON"), (b" " * (MAX_EVALS_BYTES + 1), "bytes, over"),
])
def test_a_malformed_evals_file_is_not_used_and_says_why(raw, warning):
    suite = read_evals(raw, {})
    assert suite.cases == [] and warning in suite.warnings[0]


def test_bad_evals_are_skipped_with_the_reason_and_the_counts_are_capped():
    suite = read_evals(evals_json(
        "not an object", {"id": 2}, {"id": 3, "prompt": "x" * (MAX_PROMPT_CHARS + 1)}, {"id": 4, "prompt": "a\x00b"},
        {"id": {"nested": 1}, "prompt": "fine", "assertions": "not a list", "files": "nor this"},
        {"id": 6, "prompt": "many", "assertions": [{"contains": str(i)} for i in range(MAX_ASSERTIONS + 5)]},
    ), {})
    assert [(s["index"], s["id"]) for s in suite.skipped] == [(1, None), (2, 2), (3, 3), (4, 4)]
    assert "must be an object" in suite.skipped[0]["reason"] and "no prompt" in suite.skipped[1]["reason"]
    assert "8,001 characters" in suite.skipped[2]["reason"] and "NUL" in suite.skipped[3]["reason"]
    odd, many = suite.cases
    assert odd.id is None and {i["reason"] for i in odd.invalid} == {"assertions is not a list", "files is not a list"}
    assert len(many.checks) == MAX_ASSERTIONS
    assert any("its id" in w for w in suite.warnings) and any("only the first 64" in w for w in suite.warnings)
    thousands = read_evals(evals_json(*({"prompt": f"q{i}"} for i in range(5_000))), {})
    assert len(thousands.cases) == MAX_EVALS and f"only the first {MAX_EVALS}" in thousands.warnings[0]


@pytest.mark.parametrize("path,status,reason", [
    ("evals/files/a.csv", "present", None), ("./evals/files/a.csv", "present", None),
    ("evals/files/b.csv", "missing", "not a file stored"), ("../../etc/passwd", "refused", "out of the skill"),
    ("evals/../../x", "refused", "out of the skill"), ("/etc/passwd", "refused", "absolute"),
    ("C:/Windows/win.ini", "refused", "absolute"), ("evals\\files\\a.csv", "refused", "backslash"),
    ("a\x1b[2Jb", "refused", "control characters"), ("", "refused", "empty"), ("x" * 501, "refused", "over 500"),
    (7, "refused", "not a string"),
])
def test_file_references_are_listed_never_followed(path, status, reason):
    found = file_reference(path, STORED)
    assert found["status"] == status
    if reason:
        assert reason in found["reason"]
    else:
        assert found == {"path": "evals/files/a.csv", "status": "present", "size": 3, "sha256": "ab" * 32}


def _reply(context: str) -> str:
    """The fake model: a rebase answer when the skill's text is in its context, else a shrug."""
    return "Run git rebase -i HEAD~3 and mark the others squash." if "git rebase -i" in context else "No idea."


@pytest.fixture
def eval_memory(tmp_path, fake_embedder):
    from skillgraft.memory import SkillMemory
    from skillgraft.testing import FakeEngine

    evals = evals_json(
        {"id": 1, "prompt": "squash my last three commits into one", "files": ["evals/files/log.txt", "../secret"],
         "assertions": ["Explains the rebase todo list", {"contains": "rebase -i"}, {"regex": r"HEAD~\d"},
                        {"not_contains": "No idea"}]},
        {"id": 2, "prompt": "and how do I undo it?", "assertions": ["Mentions the reflog"]},
        {"id": 3, "prompt": "x" * 5_000},  # longer than the fake window: both answers are errors, nothing stops
        {"prompt": 12},
    )
    git_skill(tmp_path / "skills", files={EVALS_JSON: evals.decode(), "evals/files/log.txt": "abc"})
    pdf_skill(tmp_path / "skills")
    with SkillMemory(tmp_path / "store", engine=FakeEngine(reply=_reply, n_ctx=2048), embedder=fake_embedder) as memory:
        memory.skills.import_folders(tmp_path / "skills")
        yield memory


def test_each_eval_is_answered_with_the_skill_grafted_and_without(eval_memory):
    seen = []
    [report] = eval_memory.skills.eval_answers(progress=lambda done, total: seen.append((done, total)))
    assert report.name == "git-squash" and report.block_id == eval_memory.blocks.get("git-squash").id
    assert seen == [(i, 6) for i in range(1, 7)]
    first, second, long = report.evals
    grafted, plain = first.with_skill, first.without_skill
    assert (grafted.decision, grafted.block_id, plain.decision, plain.block_id) == ("graft", report.block_id, "abstain", None)
    assert grafted.results == [True, True, True] and plain.results == [False, False, False]
    assert abs(grafted.prompt_tokens - plain.prompt_tokens - report.block_tokens) <= 16  # the skill's turn, give or take markers
    assert second.with_skill.reused_tokens >= report.block_tokens  # the skill's cells, made on its first use
    assert grafted.generated_tokens > 0 and grafted.prefill_s > 0 and plain.generate_s > 0
    for run in (grafted, plain):  # from the plan: the first text comes after the prefill, the end after it
        assert run.prefill_s <= run.ttft_s <= run.total_s and run.total_s >= run.prefill_s + run.generate_s
    assert (grafted.passes, plain.passes, second.with_skill.passes) == (True, False, None)
    assert [(f["path"], f["status"]) for f in first.files] == [("evals/files/log.txt", "present"), ("../secret", "refused")]
    assert second.checks == [] and second.unchecked == ["Mentions the reflog"] and second.with_skill.checked == 0
    assert "context" in long.with_skill.error and "context" in long.without_skill.error
    assert [s["reason"] for s in report.skipped] == ["no prompt (a non-empty string)"]
    summary = report.summary()
    assert summary["with_skill"]["pass_rate"] == 1.0 and summary["without_skill"]["pass_rate"] == 0.0
    assert summary["delta"]["pass_rate"] == 1.0 and summary["unchecked"] == 2
    evals = summary["with_skill"]["evals"]  # the benchmark's measures: evals passed, of those judged
    assert (evals["n"], evals["passed"], evals["pass_rate"]) == (1, 1, 1.0) and 0.2 < evals["ci_low"] < 0.21
    assert summary["without_skill"]["evals"]["passed"] == 0 and summary["delta"]["eval_pass_rate"] == 1.0
    for side in ("with_skill", "without_skill"):
        answers = [getattr(e, side) for e in (first, second)]
        assert summary[side]["ttft_s"] == pytest.approx((answers[0].ttft_s + answers[1].ttft_s) / 2)  # the median of two
        assert summary[side]["prompt_tokens"] == (answers[0].prompt_tokens + answers[1].prompt_tokens) / 2
    assert summary["delta"]["prompt_tokens"] > 0 and summary["delta"]["ttft_s"] is not None
    assert summary["with_skill"]["answers"] == 2 and summary["with_skill"]["errors"] == 1
    data = json.loads(json.dumps(report.as_dict()))
    assert data["evals"][0]["with_skill"]["passed"] == 3 and data["summary"]["invalid"] == 0
    assert not [row for row in eval_memory.store.ledger() if row["event"] == "generate"]  # an eval is not traffic


def test_limit_name_and_bad_arguments(eval_memory):
    [report] = eval_memory.skills.eval_answers("git-squash", limit=1, max_tokens=4)
    assert len(report.evals) == 1 and report.left_out == 2
    assert report.evals[0].with_skill.generated_tokens <= 4
    assert eval_memory.skills.eval_answers("pdf") == []  # a skill without evals.json
    with pytest.raises(SkillNotFoundError):
        eval_memory.skills.eval_answers("nope")
    for bad in (0, True, "2"):
        with pytest.raises(InputError, match="limit"):
            eval_memory.skills.eval_answers(limit=bad)
    with pytest.raises(InputError, match="max_tokens"):
        eval_memory.skills.eval_answers(max_tokens=0)


def test_evals_are_read_from_the_stored_version_not_from_disk(eval_memory, tmp_path):
    (tmp_path / "skills" / "git-squash" / "evals" / "evals.json").write_text("garbage")
    [report] = eval_memory.skills.eval_answers(limit=1)
    assert report.evals[0].prompt == "squash my last three commits into one"


def test_a_skill_name_other_than_the_folder_is_warned(tmp_path, fake_memory):
    write_skill(tmp_path, "git-squash", "Squash commits.", "# Squash\n\nUse git rebase -i.\n",
                files={EVALS_JSON: evals_json({"prompt": "p"}, skill_name="other").decode()})
    fake_memory.skills.import_folders(tmp_path)
    [report] = fake_memory.skills.eval_answers(max_tokens=2)
    assert "names skill 'other'" in report.warnings[0]


def test_a_malformed_evals_file_is_reported_with_no_answer_made(tmp_path, fake_memory):
    write_skill(tmp_path, "git-squash", "Squash commits.", "# Squash\n\nUse git rebase -i.\n",
                files={EVALS_JSON: "{ not json"})
    fake_memory.skills.import_folders(tmp_path)
    [report] = fake_memory.skills.eval_answers()
    assert report.evals == [] and "not valid JSON" in report.warnings[0]
    assert report.summary()["with_skill"]["pass_rate"] is None


def test_the_cli_reports_triggers_and_answers(runner, home, tmp_path, monkeypatch, eval_memory):
    from skillgraft.cli import skills as skills_cli
    from skillgraft.memory import SkillMemory
    from skillgraft.skills.answer_evals import DEFAULT_EVAL_TOKENS

    assert skills_cli.EVAL_TOKENS == DEFAULT_EVAL_TOKENS
    engine, embedder = eval_memory.engine, eval_memory.router.embedder
    eval_memory.close()
    monkeypatch.setattr(SkillMemory, "open", classmethod(
        lambda cls, home_, **o: cls(tmp_path / "store", engine=engine, embedder=embedder, model=o.get("model"))))
    result = runner.invoke(cli, ["skills", "eval", "--limit", "2", "--max-tokens", "16", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [a["name"] for a in data["answers"]] == ["git-squash"] and len(data["answers"][0]["evals"]) == 2
    assert data["answers"][0]["max_tokens"] == 16 and "answer evals: 4/4 answer" in result.stderr
    assert data["model"] == "smollm2-135m" and data["answers"][0]["evals"][0]["with_skill"]["ttft_s"] > 0
    text = runner.invoke(cli, ["skills", "eval", "git-squash", "--limit", "1"])
    assert text.exit_code == 0, text.output
    assert "with     graft" in text.output and "without  abstain" in text.output and "3/3 passed" in text.output
    assert "evals answered by smollm2-135m with block" in text.output and " first token " in text.output
    assert "  with     evals passed 1/1 (100 %, 95 % CI 21-100)  checks 3/3  mean prompt" in text.output
    assert "  without  evals passed 0/1 (0 %, 95 % CI 0-79)  checks 0/3" in text.output
    assert "median first token " in text.output and "median total " in text.output
    assert "file refused  ../secret" in text.output and "unchecked (natural language) 1" in text.output
    only = runner.invoke(cli, ["skills", "eval", "--no-answers", "--json"])
    assert json.loads(only.stdout)["answers"] == []
    by_path = str(tmp_path / "models" / "my-model.gguf")  # any model by path: the memory opens it, the report names it
    other = runner.invoke(cli, ["skills", "eval", "git-squash", "--limit", "1", "--model", by_path])
    assert other.exit_code == 0, other.output
    assert f"evals answered by {by_path} with block" in other.output


def test_the_docs_state_the_current_caps():
    from pathlib import Path

    from skillgraft.core import safe_pattern
    from skillgraft.skills import eval_cases

    text = (Path(__file__).resolve().parents[2] / "docs" / "skills.md").read_text(encoding="utf-8")
    assert f"over {safe_pattern.MAX_PATTERN_CHARS} characters" in text
    assert f"over {safe_pattern.MAX_PROGRAM:,} instructions" in text and f"over {safe_pattern.MAX_STEPS:,} automaton" in text
    assert f"up to {safe_pattern.MAX_REPEAT};" in text and f"at most {eval_cases.MAX_NEEDLE_CHARS:,}\ncharacters" in text
    assert f"At most {eval_cases.MAX_EVALS} evals per skill and {eval_cases.MAX_ASSERTIONS}\nassertions and " \
           f"{eval_cases.MAX_FILES} files per eval" in text
    assert f"over {eval_cases.MAX_PROMPT_CHARS:,} characters" in text and "over 1 MiB" in text
    assert eval_cases.MAX_EVALS_BYTES == 1 << 20
