"""The skills-effect benchmark on the fake engine and a small sample of BFCL's own tasks, prompt
and checker: every condition lays out what it says, and the tables count what happened."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest

from tests.required import need

from skillgraft.errors import ConfigError, InputError
from skillgraft.memory import SkillMemory
from skillgraft.testing import FakeEmbedder, FakeEngine

need("bfcl_eval", "bfcl-eval (pip install --no-deps, see docs/benchmarks.md)")

KNOWN = "simple_python_0"  # the fake answers it right with no document, and wrong beside every one


@pytest.fixture(scope="module")
def se():
    """The benchmark's modules, imported when a test runs: ``skillgraft.bench`` loads the engine's
    module with its package, and the fast suite's modules import with no model package."""
    from skillgraft.bench import bfcl_tasks, skills_effect, skills_effect_report

    return SimpleNamespace(tasks=bfcl_tasks, effect=skills_effect, report=skills_effect_report,
                           sample=bfcl_tasks.load_tasks(per_category=1))


def right_call(task) -> str:
    calls = [f"{name}({', '.join(f'{k}={v[0]!r}' for k, v in params.items() if v and v[0] != '')})"
             for call in task.ground_truth for name, params in call.items()]
    return "[" + ", ".join(calls) + "]"


def replier(tasks):
    """A model that calls right exactly when every needed document is in its context."""

    def reply(context: str) -> str:
        task = next(t for t in tasks if t.question in context)
        if "You choose the documentation" in context:
            return task.needed()[0]["name"]
        if task.id == KNOWN:
            return "no call" if context.count('"name": ') > 4 else right_call(task)
        return right_call(task) if all(f'"name": "{f["name"]}"' in context for f in task.needed()) else "I cannot."

    return reply


@pytest.fixture(scope="module")
def report(se):
    return se.effect.bench_skills_effect(
        ["fake"], per_category=1, max_tokens=400,
        open_memory=lambda home, model: SkillMemory(home, engine=FakeEngine(reply=replier(se.sample), n_ctx=16384),
                                                    embedder=FakeEmbedder()),
    )


def test_wilson_interval():
    from skillgraft.core.measures import wilson

    assert wilson(0, 0) == (None, None)
    assert wilson(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson(0, 4) == pytest.approx((0.0, 0.4899), abs=1e-4)
    assert wilson(4, 4)[1] == 1.0


def test_the_pasted_prompt_is_bfcls_own_and_the_checker_is_bfcls(se):
    checker = se.tasks.BfclChecker()
    task = se.sample[0]
    assert checker.instructions() + "\n\n" + checker.tool_document(task.functions) == checker.system_prompt(task.functions).rstrip()
    assert checker.check(task, right_call(task)) == (True, "")
    passed, why = checker.check(task, right_call(task).replace("10", "11"))
    assert not passed and why.startswith("value_error")
    assert checker.check(task, "The area is 25.") == (False, "decode:SyntaxError")


def test_every_condition_on_the_fake(se, report):
    tasks, conditions = se.sample, [c for c in se.effect.CONDITIONS if c != se.effect.EXPERIENCE]
    assert report["conditions"] == conditions  # learning needs a split
    runs = {(r["task_id"], r["condition"]): r for r in report["runs"]}
    assert len(runs) == len(tasks) * len(conditions) and report["skills"] == len({f["name"] for t in tasks for f in t.functions})
    for task in tasks:
        single = len(task.needed()) == 1
        assert runs[task.id, "none"]["passed"] == (task.id == KNOWN)
        assert runs[task.id, "pasted"]["passed"]
        routed = runs[task.id, "routed"]
        assert routed["passed"] == (routed["decision"] == "graft" and single and routed["block"] == task.needed()[0]["name"])
        listing = runs[task.id, "listing"]
        assert listing["chosen"] == task.needed()[0]["name"] and listing["passed"] == single
        assert runs[task.id, "all"]["fits"] and runs[task.id, "all"]["passed"] == (task.id != KNOWN)
        assert runs[task.id, "pasted"]["prompt_tokens"] > runs[task.id, "none"]["prompt_tokens"]
        assert runs[task.id, "listing"]["ttft_s"] > 0
    rows = {r["condition"]: r for r in report["rows"]}
    assert rows["pasted"]["passed"] == rows["pasted"]["n"] == len(tasks)
    assert rows["none"]["passed"] == 1 and rows["none"]["ci_low"] < 0.25 < rows["none"]["ci_high"]
    assert [(w["task_id"], w["condition"]) for w in report["worse"]] == [(KNOWN, "all")]
    assert {r["category"] for r in report["per_category"]} == {t.category for t in tasks}
    decisions = report["routed_decisions"]["fake"]
    assert decisions["tasks"] == len(tasks) and decisions["graft_on_a_needed_skill"] <= decisions.get("graft", 0)
    routed_set = report["routed_decisions"]["fake (routed-set)"]
    for task in tasks:  # a set holds the routed block, and passes where every needed document is in it
        run = runs[task.id, "routed-set"]
        assert (run["decision"] != "graft") or (run["block"] in run["routed"] and 1 <= len(run["routed"]) <= 3)
        assert run["passed"] == (run["decision"] == "graft" and set(run["skills"]) <= set(run["routed"]))
        assert runs[task.id, "routed"]["routed"] == ([runs[task.id, "routed"]["block"]]
                                                     if runs[task.id, "routed"]["decision"] == "graft" else [])
    assert routed_set["every_needed_skill_placed"] >= report["routed_decisions"]["fake"]["every_needed_skill_placed"]
    grafts = decisions["grafts"]["functions"]  # every routed task is told by what it grafted, with its passes
    assert sum(c["tasks"] for c in grafts.values()) == len(tasks)
    assert grafts.get("needed", {}).get("tasks", 0) == decisions["graft_on_a_needed_skill"]
    assert sum(c["passed"] for c in grafts.values()) == sum(runs[t.id, "routed"]["passed"] for t in tasks)
    assert "prompt" not in report["runs"][0]
    # every answer starts on an empty context: it reuses prefix states, never the last answer's cells
    assert {r["reused_from"] for r in report["runs"]} <= {"", "derived"} and any(r["reused_tokens"] for r in report["runs"])


def test_a_routed_text_skill_is_the_pasted_document_token_for_token(se, report):
    """The skills are text: a graft of a task's one needed document lays out the pasted prompt."""
    runs = {(r["task_id"], r["condition"]): r for r in report["runs"]}
    single = [t.id for t in se.sample if len(t.needed()) == 1 and runs[t.id, "routed"]["decision"] == "graft"
              and runs[t.id, "routed"]["block"] == t.needed()[0]["name"]]
    assert single, "routing grafted no task's one needed document"
    exact = report["exactness"]
    assert {t["task_id"] for t in exact["tasks"] if t["same_prompt"]} == set(single)
    assert all(t["identical"] and not t["why"] for t in exact["tasks"] if t["same_prompt"])
    assert exact["models"]["fake"]["identical_where_same_prompt"] == len(single)
    for task_id in single:
        assert runs[task_id, "routed"]["prompt_tokens"] == runs[task_id, "pasted"]["prompt_tokens"]


def _run(se, condition, text, prompt, *, skills=("f",), block="f", decision="graft", reused=(0, ""), task="t0"):
    return se.report.TaskRun("m", condition, task, "simple_python", tuple(skills), text=text, prompt=tuple(prompt),
                             decision=decision, block=block if condition == "routed" else None,
                             reused_tokens=reused[0], reused_from=reused[1])


def test_exactness_compares_grafts_of_a_needed_document_and_says_why_they_differ(se):
    run = lambda *a, **k: _run(se, *a, **k)  # noqa: E731
    runs = [
        run("pasted", "[f(a=1)]", [1, 2, 3], task="same"), run("routed", "[f(a=1)]", [1, 2, 3], task="same"),
        run("pasted", "[f(a=1)]", [1, 2, 3], task="numeric"),
        run("routed", "[f(a=2)]", [1, 2, 3], reused=(2, "derived"), task="numeric"),
        run("pasted", "[f(a=1)]", [1, 2, 3, 4], task="layout"), run("routed", "[g()]", [1, 2, 9], task="layout"),
        run("pasted", "[f(), g()]", [1, 5], skills=("f", "g"), task="two"),
        run("routed", "[f()]", [1, 2], skills=("f", "g"), task="two"),
        run("pasted", "x", [1], task="elsewhere"), run("routed", "y", [1], block="h", task="elsewhere"),
        run("pasted", "x", [1], task="abstained"), run("routed", "y", [1], decision="abstain", block=None, task="abstained"),
        run("routed", "y", [1], task="unpasted"),
    ]
    exact = se.report.exactness(runs)
    rows = {t["task_id"]: t for t in exact["tasks"]}
    assert list(rows) == ["same", "numeric", "layout", "two"]
    assert rows["same"] == {"model": "m", "task_id": "same", "skill": "f", "same_prompt": True, "identical": True, "why": ""}
    assert rows["numeric"]["same_prompt"] and not rows["numeric"]["identical"]
    assert rows["numeric"]["why"] == ("the same 3 prompt tokens, evaluated otherwise: routed reused 2 cells (derived), "
                                      "pasted 0 (none); the answers part at character 5")
    assert rows["layout"]["why"] == "other prompts: routed 3 tokens, pasted 4, the same up to token 2; the answers part at character 1"
    assert rows["two"]["why"].startswith("the task needs 2 documents and the graft holds one")
    assert exact["models"] == {"m": {"compared": 4, "same_prompt": 2, "identical": 1, "identical_where_same_prompt": 1}}


def test_a_prompt_that_does_not_fit_is_counted_apart(se):
    small = se.effect.bench_skills_effect(
        ["fake"], categories=["simple_python"], per_category=2, conditions=["none", "all"], max_tokens=400,
        open_memory=lambda home, model: SkillMemory(home, engine=FakeEngine(reply="[x()]", n_ctx=2048),
                                                    embedder=FakeEmbedder()),
    )
    rows = {r["condition"]: r for r in small["rows"]}
    assert rows["all"]["not_fitting"] == 2 and rows["all"]["n"] == 0 and rows["all"]["pass_rate"] is None
    assert rows["none"]["n"] == 2 and rows["none"]["passed"] == 0


def test_a_name_documented_twice_differently_gets_a_second_skill(se):
    checker, task = se.tasks.BfclChecker(), se.sample[0]
    other = se.tasks.BfclTask("other_0", task.category, task.messages,
                     ({**task.functions[0], "description": "Another text."},), task.ground_truth)
    library = se.effect.SkillLibrary([task, other], checker)
    name = task.functions[0]["name"]
    assert library.needs == {task.id: (name,), "other_0": (f"{name}@other_0",)}
    assert library.chosen(f"I pick {name}@other_0 then {name}") == f"{name}@other_0"
    assert library.chosen("none of them") is None


def test_a_graft_is_told_needed_namesake_offered_or_other(se):
    """What a routed graft was for a task: its own document, another task's document of the same
    function, an irrelevance task's own (unfitting) function, or another function of the catalog."""
    checker, task = se.tasks.BfclChecker(), se.sample[0]
    name = task.functions[0]["name"]
    other = se.tasks.BfclTask("other_0", task.category, task.messages,
                              ({**task.functions[0], "description": "Another text."},), task.ground_truth)
    irrelevant = se.tasks.category_tasks("irrelevance")[0]
    library = se.effect.SkillLibrary([task, other, irrelevant], checker)
    assert library.needs[irrelevant.id] == ()  # an irrelevance task needs none of its functions
    own = next(n for n, (f, _) in library.documents.items() if f["name"] == irrelevant.functions[0]["name"])
    assert library.graft_kind(task, name) == "needed"
    assert library.graft_kind(task, f"{name}@other_0") == "namesake"
    assert library.graft_kind(task, own) == "other"
    assert library.graft_kind(irrelevant, own) == "offered"
    assert library.graft_kind(irrelevant, name) == "other"
    assert library.graft_kind(task, None) == library.graft_kind(task, "no such document") == "abstain"


def test_without_bfcl_installed_or_with_an_unknown_category_it_says_so(se, monkeypatch):
    with pytest.raises(InputError, match="unknown BFCL categories"):
        se.tasks.load_tasks(["live_nothing"])
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "bfcl_eval" else real(name, *a))
    with pytest.raises(ConfigError, match="pip install --no-deps bfcl-eval==2026.3.23"):
        se.tasks.load_tasks()


def test_the_cli_prints_the_table_and_the_routed_answers_against_the_pasted(se, monkeypatch):
    import json

    from click.testing import CliRunner

    from skillgraft.cli.main import cli

    tasks = [t for t in se.sample if t.category == "simple_python"]
    monkeypatch.setattr(SkillMemory, "open", classmethod(lambda cls, home, **o: cls(
        home, engine=FakeEngine(reply=replier(tasks), n_ctx=16384), embedder=FakeEmbedder())))
    args = ["bench", "skills-effect", "--models", "fake", "--categories", "simple_python", "--per-category", "1",
            "--max-tokens", "200"]
    text = CliRunner().invoke(cli, args)
    assert text.exit_code == 0, text.output
    assert "fake                 pasted                   1/1" in text.output
    assert "routed = pasted on fake: 1/1 grafts of a needed document answered as pasted; 1/1" in text.output
    data = json.loads(CliRunner().invoke(cli, [*args, "--json"]).stdout)
    assert data["exactness"]["tasks"][0]["task_id"] == KNOWN and data["exactness"]["tasks"][0]["identical"]


def test_tasks_by_id_and_position_and_a_seeded_split_per_category(se):
    from skillgraft.bench import bfcl_select

    named = bfcl_select.parse_tasks("live_simple:0-2,irrelevance_5,live_simple_1-1-0")
    assert [t.id for t in named] == ["live_simple_0-0-0", "live_simple_1-1-0", "live_simple_2-2-0", "irrelevance_5"]
    with pytest.raises(InputError):
        bfcl_select.parse_tasks("live_simple:5-2")
    with pytest.raises(InputError):
        bfcl_select.parse_tasks("nothing_7")
    halves = bfcl_select.halves("live_parallel", 0)
    assert halves == bfcl_select.halves("live_parallel", 0) != bfcl_select.halves("live_parallel", 1)
    assert sorted(halves.values()).count("train") == (len(halves) + 1) // 2
    chosen = bfcl_select.select_tasks(["live_parallel", "irrelevance"], 3, split="test", seed=0)
    assert [t.category for t in chosen.tasks] == ["live_parallel"] * 3 + ["irrelevance"] * 3
    assert all(halves[t.id] == "test" for t in chosen.tasks if t.category == "live_parallel")
    assert all(halves[t.id] == "train" for t in chosen.learn if t.category == "live_parallel") and len(chosen.learn) == 6
    assert not {t.id for t in chosen.tasks} & {t.id for t in chosen.learn}
    flipped = bfcl_select.select_tasks([], None, tasks="live_parallel:0-15", split="train", seed=0)
    assert {t.id for t in flipped.tasks} == {i for i, h in halves.items() if h == "train"}


def test_an_irrelevance_task_passes_when_no_call_is_made_as_bfcl_judges(se):
    checker = se.tasks.BfclChecker()
    task = se.tasks.category_tasks("irrelevance")[0]
    assert task.irrelevant and task.needed() == [] and task.offered() == list(task.functions)
    assert checker.check(task, "I cannot answer that with these functions.") == (True, "")
    assert checker.check(task, "[]") == (True, "")
    assert checker.check(task, f"[{task.functions[0]['name']}(x=1)]") == (False, "irrelevance_error:decoder_success")
    verifier = se.tasks.BfclVerifier(checker, se.sample[0])
    assert verifier.check("", right_call(se.sample[0]), None).ok and not verifier.check("", "no", None).ok


def test_routed_set_with_experience_learns_from_the_other_half_only(se):
    from skillgraft.bench import bfcl_select

    chosen = bfcl_select.select_tasks(["simple_python"], 3, split="test", seed=0)
    every = [*chosen.tasks, *chosen.learn]
    report = se.effect.bench_skills_effect(
        ["fake"], categories=["simple_python"], per_category=3, split="test", max_tokens=400,
        conditions=["routed-set", se.effect.EXPERIENCE],
        open_memory=lambda home, model: SkillMemory(home, engine=FakeEngine(reply=replier(every), n_ctx=16384),
                                                    embedder=FakeEmbedder()))
    assert report["split"] == "test" and report["tasks"] == 3 and report["learned_from"] == 3
    assert {r["task_id"] for r in report["runs"]} == {t.id for t in chosen.tasks}
    learned = report["learned"]["fake"]
    assert learned["tasks"] == 3 and learned["deposited"] == learned["passed"] == learned["with_skills"]
    runs = {(r["task_id"], r["condition"]): r for r in report["runs"]}
    for task in chosen.tasks:  # experience never answers a test question: it is routed and answered
        assert runs[task.id, se.effect.EXPERIENCE]["decision"] in ("graft", "abstain")
    assert "fake (routed-set+experience)" in report["routed_decisions"]
    with pytest.raises(InputError, match="--split"):
        se.effect.bench_skills_effect(["fake"], conditions=[se.effect.EXPERIENCE])
