"""The skills-effect benchmark's tables: pass rates with Wilson intervals, tokens and times
(:mod:`skillgraft.core.measures`), per condition, per category and per skill; the tasks a skill
made worse; and the exactness of the routed skill against its pasted document."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Iterable, Optional

from ..core.measures import answer_costs, pass_rate
from ..kv.prefix_keys import common_prefix

__all__ = ["TaskRun", "exactness", "summarize"]


@dataclass
class TaskRun:
    """One task answered under one condition. ``skills`` are the documents the task needs;
    ``decision`` and ``block`` what the memory did (routed; ``routed`` every skill its prompt held),
    ``chosen`` what the model picked
    (listing); ``fits`` is False where the prompt did not fit the window (not answered).
    ``prompt`` holds the tokens the answer was prompted with, ``reused_tokens`` how many of them
    the context reused (from ``reused_from``) rather than evaluated; the tokens stay out of
    :meth:`as_dict`. ``examples``: the verified examples placed beside the routed skills;
    ``graft``: what a routed graft was for the task (``SkillLibrary.graft_kind``)."""

    model: str
    condition: str
    task_id: str
    category: str
    skills: tuple[str, ...]
    passed: bool = False
    error_type: str = ""
    text: str = ""
    prompt_tokens: int = 0
    ttft_s: float = 0.0
    total_s: float = 0.0
    decision: str = ""
    block: Optional[str] = None
    routed: tuple[str, ...] = ()
    chosen: Optional[str] = None
    fits: bool = True
    error: str = ""
    reused_tokens: int = 0
    reused_from: str = ""
    examples: int = 0
    graft: str = ""
    prompt: tuple[int, ...] = field(default=(), repr=False)

    def as_dict(self) -> dict:
        data = asdict(self)
        del data["prompt"]
        return {**data, "skills": list(self.skills), "routed": list(self.routed)}


def _cell(runs: list[TaskRun]) -> dict:
    answered = [r for r in runs if r.fits and not r.error]
    return {
        **pass_rate(r.passed for r in answered), "not_fitting": sum(not r.fits for r in runs),
        "errors": sum(bool(r.error) for r in runs if r.fits),
        **answer_costs([r.prompt_tokens for r in answered], [r.ttft_s for r in answered], [r.total_s for r in answered]),
    }


def _group(runs: Iterable[TaskRun], key) -> dict:
    groups: dict = {}
    for run in runs:
        for k in key(run):
            groups.setdefault(k, []).append(run)
    return groups


def summarize(runs: list[TaskRun], conditions: tuple[str, ...]) -> dict:
    """Rows per model and condition, per category and per skill; the routed decisions; the
    routed answers against the pasted ones (:func:`exactness`); the tasks a condition failed
    although the model passed them with no skill."""
    rows = [{"model": m, "condition": c, **_cell(rs)}
            for (m, c), rs in _group(runs, lambda r: [(r.model, r.condition)]).items()]
    per_category = [{"model": m, "category": cat, "condition": c, **_cell(rs)}
                    for (m, cat, c), rs in _group(runs, lambda r: [(r.model, r.category, r.condition)]).items()]
    per_skill = [{"model": m, "skill": s, "condition": c, **_cell(rs)}
                 for (m, s, c), rs in _group(runs, lambda r: [(r.model, s, r.condition) for s in r.skills]).items()]
    order = {c: i for i, c in enumerate(conditions)}
    for table in (rows, per_category, per_skill):
        table.sort(key=lambda row: tuple(order.get(v, v) if k == "condition" else v
                                         for k, v in row.items() if k in ("model", "category", "skill", "condition")))
    plain = {(r.model, r.task_id): r.passed for r in runs if r.condition == "none" and r.fits and not r.error}
    worse = [{"model": r.model, "task_id": r.task_id, "condition": r.condition, "skills": list(r.skills),
              "error_type": r.error_type, "block": r.block, "chosen": r.chosen}
             for r in runs if r.condition != "none" and r.fits and not r.passed and plain.get((r.model, r.task_id))]
    routed = [r for r in runs if r.condition.startswith("routed")]
    decisions = {
        f"{m} ({c})" if c != "routed" else m: {
            "tasks": len(rs), **Counter(r.decision or "error" for r in rs),
            "graft_on_a_needed_skill": sum(r.decision == "graft" and r.block in r.skills for r in rs),
            "every_needed_skill_placed": sum(r.decision == "graft" and set(r.skills) <= set(r.routed) for r in rs),
            "skills_placed": sum(len(r.routed) for r in rs), "with_examples": sum(r.examples > 0 for r in rs),
            "grafts": _graft_kinds(rs)}
        for (m, c), rs in _group(routed, lambda r: [(r.model, r.condition)]).items()
    }
    return {"rows": rows, "per_category": per_category, "per_skill": per_skill, "worse": worse,
            "routed_decisions": decisions, "exactness": exactness(runs)}


def _graft_kinds(runs: list[TaskRun]) -> dict:
    """Per kind of task (``functions``: some function fits; ``no_function_fits``: an irrelevance
    task) and kind of graft, the tasks and how many of them passed."""
    kinds: dict = {}
    for run in runs:
        if run.graft:
            task_kind = "functions" if run.skills else "no_function_fits"
            cell = kinds.setdefault(task_kind, {}).setdefault(run.graft, {"tasks": 0, "passed": 0})
            cell["tasks"] += 1
            cell["passed"] += run.passed
    return kinds


def exactness(runs: list[TaskRun]) -> dict:
    """Per task where routing grafted a document the task needs: whether its answer is the
    pasted one's (``identical``), whether the two prompts were the same tokens
    (``same_prompt``), and ``why`` they differ where they do; the counts per model."""
    pasted = {(r.model, r.task_id): r for r in runs if r.condition == "pasted" and r.fits and not r.error}
    tasks = []
    for run in runs:
        other = pasted.get((run.model, run.task_id))
        if run.condition != "routed" or run.decision != "graft" or run.block not in run.skills or other is None \
                or run.error:
            continue
        same_prompt = bool(run.prompt) and run.prompt == other.prompt
        identical = run.text == other.text
        tasks.append({"model": run.model, "task_id": run.task_id, "skill": run.block, "same_prompt": same_prompt,
                      "identical": identical, "why": "" if identical else _why_different(run, other, same_prompt)})
    models = {}
    for row in tasks:
        counts = models.setdefault(row["model"], {"compared": 0, "same_prompt": 0, "identical": 0,
                                                  "identical_where_same_prompt": 0})
        counts["compared"] += 1
        counts["same_prompt"] += row["same_prompt"]
        counts["identical"] += row["identical"]
        counts["identical_where_same_prompt"] += row["same_prompt"] and row["identical"]
    return {"models": models, "tasks": tasks}


def _why_different(routed: TaskRun, pasted: TaskRun, same_prompt: bool) -> str:
    """Why a routed answer is not the pasted one's text."""
    parted = len(os.path.commonprefix([routed.text, pasted.text]))
    answers = f"the answers part at character {parted}"
    if same_prompt:
        return (f"the same {len(routed.prompt)} prompt tokens, evaluated otherwise: routed reused "
                f"{routed.reused_tokens} cells ({routed.reused_from or 'none'}), pasted {pasted.reused_tokens} "
                f"({pasted.reused_from or 'none'}); {answers}")
    if len(routed.skills) > 1:
        return f"the task needs {len(routed.skills)} documents and the graft holds one: other prompts; {answers}"
    at = common_prefix(routed.prompt, pasted.prompt)
    return (f"other prompts: routed {len(routed.prompt)} tokens, pasted {len(pasted.prompt)}, "
            f"the same up to token {at}; {answers}")
