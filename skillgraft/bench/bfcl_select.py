"""Which BFCL tasks a run answers, and which half of them it learns from.

``--tasks`` names tasks by id (``live_simple_3-2-1``) or by position in BFCL's order within a
category (``live_simple:0-49``, ``irrelevance:7``), comma-separated. ``--split train|test`` with
``--seed`` halves each category once, whatever is selected: its tasks in a seeded shuffle, the
first half (rounded up) ``train``, the rest ``test``. A run reports the chosen half and learns
(deposits verified answers) only from the other one, so no figure is measured on a task whose
answer was learned.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Optional, Sequence

from ..errors import InputError
from .bfcl_tasks import CATEGORIES, BfclTask, category_tasks

__all__ = ["HALVES", "Selection", "halves", "parse_tasks", "select_tasks"]

HALVES = ("train", "test")
_POSITIONS = re.compile(r"(?P<category>[a-z_]+):(?P<first>\d+)(?:-(?P<last>\d+))?")


@dataclass(frozen=True)
class Selection:
    """The tasks a run reports (``tasks``) and those it may learn from (``learn``: the other
    half of the same categories, empty without a split)."""

    tasks: tuple[BfclTask, ...]
    learn: tuple[BfclTask, ...] = ()
    split: Optional[str] = None
    seed: int = 0


def halves(category: str, seed: int) -> dict[str, str]:
    """Task id → ``train`` or ``test`` for every task of ``category`` (seeded, per category)."""
    ids = [task.id for task in category_tasks(category)]
    random.Random(f"{seed}:{category}").shuffle(ids)
    cut = (len(ids) + 1) // 2
    return {task_id: HALVES[i >= cut] for i, task_id in enumerate(ids)}


def parse_tasks(spec: str) -> list[BfclTask]:
    """The tasks ``spec`` names (ids and ``category:first[-last]`` positions), in its order, each once."""
    chosen: dict[str, BfclTask] = {}
    by_category: dict[str, list[BfclTask]] = {}

    def of(category: str) -> list[BfclTask]:
        if category not in by_category:
            by_category[category] = category_tasks(category)
        return by_category[category]

    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        match = _POSITIONS.fullmatch(item)
        if match:
            tasks = of(match["category"])
            first, last = int(match["first"]), int(match["last"] or match["first"])
            if last < first or last >= len(tasks):
                raise InputError(f"{item!r}: {match['category']} holds tasks 0 to {len(tasks) - 1}")
            found = tasks[first:last + 1]
        else:
            category = next((c for c in sorted(CATEGORIES, key=len, reverse=True) if item.startswith(f"{c}_")), None)
            found = [t for t in of(category) if t.id == item] if category else []
            if not found:
                raise InputError(f"no BFCL task {item!r}: give an id or CATEGORY:FIRST-LAST")
        chosen.update((task.id, task) for task in found)
    if not chosen:
        raise InputError("--tasks names no task")
    return list(chosen.values())


def select_tasks(categories: Sequence[str], per_category: Optional[int], *, tasks: Optional[str] = None,
                 split: Optional[str] = None, seed: int = 0) -> Selection:
    """The run's tasks: those ``tasks`` names, else the first ``per_category`` of each category
    (with a split: of each half); with ``split``, that half reported and the other learned from."""
    if split is not None and split not in HALVES:
        raise InputError(f"--split is train or test, got {split!r}")
    if tasks:
        pool = parse_tasks(tasks)
        categories = list(dict.fromkeys(task.category for task in pool))
    else:
        unknown = [c for c in categories if c not in CATEGORIES]
        if unknown:
            raise InputError(f"unknown BFCL categories {unknown}: choose from {', '.join(CATEGORIES)}")
        pool = [task for category in categories for task in category_tasks(category)]
    if split is None:
        if not tasks:
            pool = [task for category in categories for task in [t for t in pool if t.category == category][:per_category]]
        return Selection(tuple(pool))
    half = {task_id: h for category in categories for task_id, h in halves(category, seed).items()}
    other = HALVES[split == "train"]
    reported, learned = [], []
    for category in categories:
        mine = [t for t in pool if t.category == category]
        reported += [t for t in mine if half[t.id] == split][: None if tasks else per_category]
        learned += [t for t in mine if half[t.id] == other][: None if tasks else per_category]
    return Selection(tuple(reported), tuple(learned), split, seed)
