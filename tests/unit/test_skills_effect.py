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


def test_wilson_interval(se):
    wilson = se.report.wilson
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
    tasks, conditions = se.sample, se.effect.CONDITIONS
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


def test_without_bfcl_installed_or_with_an_unknown_category_it_says_so(se, monkeypatch):
    with pytest.raises(InputError, match="unknown BFCL categories"):
        se.tasks.load_tasks(["live_simple"])
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "bfcl_eval" else real(name, *a))
    with pytest.raises(ConfigError, match="pip install --no-deps bfcl-eval==2026.3.23"):
        se.tasks.load_tasks()
