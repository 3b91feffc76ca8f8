"""Routing alone on BFCL's function catalogs: does a question reach a function its task needs,
and does a question no function fits abstain?

The catalog is the one ``skillgraft bench skills-effect`` builds (every function document of the
chosen tasks, both halves, one text skill each; ``SkillLibrary``), in a store with the fake engine
(routing does not read the model) and the real MiniLM encoder. Each half's questions are routed
as the benchmark routes them (``SkillMemory.plan`` on the app's system turn and the task's chat),
each graft told as the benchmark tells it: the task's own document, a namesake (another task's
document of the same function), an irrelevance task's own unfitting function, another function;
with ``--experience``, the train half's questions are first kept as experience of the skills their
tasks need (an oracle of what verified answers would teach: the ceiling of learning), and only
the test half is reported. No model answers: this measures the router, in minutes.

    python benchmarks/bfcl_routing_eval.py --per-category 50 --out docs/data/bfcl_routing.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from skillgraft.bench.bfcl_select import select_tasks
from skillgraft.bench.bfcl_tasks import BfclChecker
from skillgraft.bench.route_catalog import FAKE_N_CTX
from skillgraft.bench.skills_effect import SkillLibrary, task_chat
from skillgraft.memory import SkillMemory
from skillgraft.testing import FakeEngine

LIVE = ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple", "irrelevance", "live_irrelevance")


def route_half(memory, tasks, library, blocks, base) -> dict:
    """Per kind of task and per category, what the route grafted (``SkillLibrary.graft_kind``)."""
    counts: dict[str, Counter] = {}
    started = time.perf_counter()
    for task in tasks:
        recall = memory.plan(task_chat(base, None, task)).recall
        kind = library.graft_kind(task, blocks[recall.block.id] if recall.decision == "graft" else None)
        for group in ("no_function_fits" if task.irrelevant else "functions", task.category):
            counts.setdefault(group, Counter())[kind] += 1
    seconds = time.perf_counter() - started
    report = {k: dict(sorted(v.items())) | {"n": sum(v.values())} for k, v in counts.items()}
    report["ms_per_route"] = round(1000 * seconds / max(1, len(tasks)), 2)
    return report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--categories", default=",".join(LIVE))
    parser.add_argument("--per-category", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--experience", action="store_true", help="keep the train half's questions as experience first")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    categories = tuple(args.categories.split(","))
    test = select_tasks(categories, args.per_category, split="test", seed=args.seed)
    checker = BfclChecker()
    library = SkillLibrary([*test.tasks, *test.learn], checker)
    base = checker.instructions()
    report = {"categories": list(categories), "per_category": args.per_category, "seed": args.seed,
              "skills": len(library.documents), "experience": args.experience, "halves": {}}
    with tempfile.TemporaryDirectory(prefix="bfcl-routing-") as folder, \
            SkillMemory(Path(folder) / "store", engine=FakeEngine(n_ctx=FAKE_N_CTX)) as memory:
        started = time.perf_counter()
        blocks = library.store(memory)
        ids = {name: block_id for block_id, name in blocks.items()}
        report["import_s"] = round(time.perf_counter() - started, 1)
        if args.experience:
            for task in test.learn:
                if not task.irrelevant:
                    memory.router.add_keys(memory.store.get(ids[library.needs[task.id][0]]), [task.question], kind="experience")
            report["halves"]["test"] = route_half(memory, test.tasks, library, blocks, base)
        else:
            for half, tasks in (("train", test.learn), ("test", test.tasks)):
                report["halves"][half] = route_half(memory, tasks, library, blocks, base)
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
