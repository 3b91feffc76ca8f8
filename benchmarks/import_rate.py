"""The import rate of Agent Skills folders, and a re-import's, in seconds a skill; the routes after.

Each ROOT is imported into a fresh store (the encoder loaded first, not timed), then imported
again unchanged; both timed. Then every query of the ``--queries`` files is routed, and its
decision and block recorded, so that two code paths can be shown to route alike. With
``--compare OLD_TREE``, the same runs go through the code of OLD_TREE (an earlier commit's files,
``git archive COMMIT | tar -x -C OLD_TREE``) and this tree in turn, ``--repeats`` times each,
the first path alternating, each in a process of its own.

    .venv/bin/python benchmarks/import_rate.py ROOT... [--queries FILE ...] [--compare OLD_TREE]
        [--repeats 3] [--out docs/data/import_rate.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from reports import write_report

HERE = Path(__file__).resolve().parent


def run_once(roots: list, queries: list) -> dict:
    """One import of each root (and its re-import) in this process, and the routes after."""
    import skillgraft
    from skillgraft.memory import SkillMemory

    rows = []
    requests = [q for path in queries for q in _queries(path)]
    with tempfile.TemporaryDirectory() as work:
        for number, root in enumerate(roots):
            with SkillMemory(Path(work) / f"home{number}") as memory:
                memory.router.embedder.encode(["warm-up"])
                started = time.perf_counter()
                report = memory.skills.import_folders([root])
                first = time.perf_counter() - started
                started = time.perf_counter()
                again = memory.skills.import_folders([root])
                second = time.perf_counter() - started
                routes = {}
                for query in requests:
                    recall = memory.route(query)
                    routes[query] = [recall.decision, recall.block_id]
            n = len(report.imported)
            rows.append({"root": str(root), "skills": n, "unchanged_again": len(again.unchanged),
                         "parts": sum(len(item.blocks) for item in report.imported),
                         "import_s": round(first, 3), "import_s_per_skill": round(first / max(n, 1), 4),
                         "reimport_s": round(second, 4), "routes": routes})
    return {"code": str(Path(skillgraft.__file__).parent.parent), "rows": rows}


def _queries(path) -> list[str]:
    data = json.loads(Path(path).read_text())
    found = []
    for value in data.values():
        if not isinstance(value, (dict, list)):
            continue  # a note
        for half in (value.values() if isinstance(value, dict) else [value]):
            found += [item["query"] if isinstance(item, dict) else item[0] if isinstance(item, list) else item
                      for item in half]
    return found


def _in_a_process(tree: Path, roots: list, queries: list) -> dict:
    env = {**os.environ, "IMPORT_RATE_TREE": str(tree)}
    out = subprocess.run([sys.executable, __file__, "--once", *map(str, roots), *sum((["--queries", q] for q in queries), [])],
                         env=env, cwd=tree, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roots", nargs="+")
    parser.add_argument("--queries", action="append", default=[])
    parser.add_argument("--compare", type=Path, help="An earlier tree of the code, run in turn with this one.")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    roots = [os.path.abspath(r) for r in args.roots]
    queries = [os.path.abspath(q) for q in args.queries]
    if args.once:
        sys.path.insert(0, os.environ["IMPORT_RATE_TREE"])  # ahead of the installed package
        print(json.dumps(run_once(roots, queries)))
        return
    trees = {"after": HERE.parent, **({"before": args.compare.resolve()} if args.compare else {})}
    runs = {name: [] for name in trees}
    load_before = os.getloadavg()
    for repeat in range(args.repeats):
        order = list(trees) if repeat % 2 == 0 else list(reversed(trees))
        for name in order:
            runs[name].append(_in_a_process(trees[name], roots, queries))
            print(f"{name} run {repeat + 1}: " + ", ".join(
                f"{Path(r['root']).name} {r['import_s_per_skill']} s/skill" for r in runs[name][-1]["rows"]), file=sys.stderr)
    table = []
    for name, done in runs.items():
        for index, root in enumerate(roots):
            rates = [run["rows"][index]["import_s_per_skill"] for run in done]
            first = done[0]["rows"][index]
            table.append({"code": name, "root": Path(root).name, "skills": first["skills"], "parts": first["parts"],
                          "import_s_per_skill_median": round(statistics.median(rates), 4),
                          "import_s_per_skill_runs": rates,
                          "reimport_s_median": round(statistics.median(run["rows"][index]["reimport_s"] for run in done), 4),
                          "unchanged_again": first["unchanged_again"]})
    same = None
    if "before" in runs:
        same = all(a["routes"] == b["routes"] for x, y in zip(runs["after"], runs["before"])
                   for a, b in zip(x["rows"], y["rows"]))
    report = {"rows": table, "routes_identical": same, "queries": sum(len(_queries(q)) for q in queries),
              "repeats": args.repeats, "load_average_before": [round(x, 2) for x in load_before],
              "load_average_after": [round(x, 2) for x in os.getloadavg()], "cpu_count": os.cpu_count()}
    for row in table:
        print(f"{row['code']:6} {row['root']:20} {row['skills']:>3} skills {row['parts']:>4} parts "
              f"{row['import_s_per_skill_median']:.3f} s/skill (runs {row['import_s_per_skill_runs']}), "
              f"re-import {row['reimport_s_median']:.3f} s")
    print(f"routes identical: {same}; load {report['load_average_before']} -> {report['load_average_after']}")
    write_report(report, str(args.out) if args.out else None)


if __name__ == "__main__":
    main()
