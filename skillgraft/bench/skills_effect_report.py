"""The skills-effect benchmark's tables: pass rates with Wilson intervals, tokens and times, per
condition, per category and per skill, and the tasks a skill made worse."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass
from statistics import fmean, median
from typing import Iterable, Optional

__all__ = ["TaskRun", "summarize", "wilson"]

Z95 = 1.959963984540054


@dataclass
class TaskRun:
    """One task answered under one condition. ``skills`` are the documents the task needs;
    ``decision`` and ``block`` what the memory did (routed), ``chosen`` what the model picked
    (listing); ``fits`` is False where the prompt did not fit the window (not answered)."""

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
    chosen: Optional[str] = None
    fits: bool = True
    error: str = ""

    def as_dict(self) -> dict:
        return {**asdict(self), "skills": list(self.skills)}


def wilson(passed: int, n: int, z: float = Z95) -> tuple[Optional[float], Optional[float]]:
    """The Wilson score interval of a pass rate (95 % by default); (None, None) for no trials."""
    if n <= 0:
        return None, None
    rate = passed / n
    centre = (rate + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _cell(runs: list[TaskRun]) -> dict:
    answered = [r for r in runs if r.fits and not r.error]
    passed = sum(r.passed for r in answered)
    low, high = wilson(passed, len(answered))
    return {
        "n": len(answered), "passed": passed, "pass_rate": passed / len(answered) if answered else None,
        "ci_low": low, "ci_high": high, "not_fitting": sum(not r.fits for r in runs),
        "errors": sum(bool(r.error) for r in runs if r.fits),
        "prompt_tokens": fmean(r.prompt_tokens for r in answered) if answered else None,
        "ttft_s": median(r.ttft_s for r in answered) if answered else None,
        "total_s": median(r.total_s for r in answered) if answered else None,
    }


def _group(runs: Iterable[TaskRun], key) -> dict:
    groups: dict = {}
    for run in runs:
        for k in key(run):
            groups.setdefault(k, []).append(run)
    return groups


def summarize(runs: list[TaskRun], conditions: tuple[str, ...]) -> dict:
    """Rows per model and condition, per category and per skill; the routed decisions, and how
    often a graft of the one needed skill answered as its pasted document did; the tasks a
    condition failed although the model passed them with no skill."""
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
    routed = [r for r in runs if r.condition == "routed"]
    decisions = {
        m: {"tasks": len(rs), **Counter(r.decision or "error" for r in rs),
            "graft_on_a_needed_skill": sum(r.decision == "graft" and r.block in r.skills for r in rs)}
        for m, rs in _group(routed, lambda r: [r.model]).items()
    }
    pasted = {(r.model, r.task_id): r.text for r in runs if r.condition == "pasted" and r.fits and not r.error}
    alike = [(r.model, r.text == pasted[(r.model, r.task_id)]) for r in routed
             if r.decision == "graft" and (r.block,) == r.skills and (r.model, r.task_id) in pasted]
    same = {m: {"compared": sum(1 for k, _ in alike if k == m), "same_text": sum(1 for k, e in alike if k == m and e)}
            for m in {m for m, _ in alike}}
    return {"rows": rows, "per_category": per_category, "per_skill": per_skill, "worse": worse,
            "routed_decisions": decisions, "routed_same_as_pasted": same}
