"""Routing evaluation: in-scope accuracy and out-of-domain recall on held-out queries.

Builds a store of 40 skills from benchmarks/data/intents.json (a short manual per skill,
captured on the embedded model; the train utterances as routing examples), calibrates the
abstain threshold on the calibration split, then routes the held-out test split.

    .venv/bin/python benchmarks/routing_eval.py [--out docs/data/routing_eval.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from skillgraft.memory import SkillMemory
from skillgraft.router import wilson_interval

DATA = Path(__file__).parent / "data" / "intents.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/data/routing_eval.json")
    args = parser.parse_args()
    data = json.loads(DATA.read_text())
    intents = data["intents"]
    with tempfile.TemporaryDirectory() as home, SkillMemory(home) as memory:
        started = time.perf_counter()
        for name, intent in intents.items():
            manual = f"Skill manual: {name.replace('_', ' ')}. {intent['description']}"
            memory.add_manual(name, manual, description=intent["description"], examples=intent["train"])
        build_s = time.perf_counter() - started
        calibration = memory.calibrate(
            [(q, name) for name, i in intents.items() for q in i["calibration"]], data["ood"]["calibration"]
        )
        test_in = [(q, name) for name, i in intents.items() for q in i["test"]]
        right = abstained = 0
        latencies = []
        for query, name in test_in:
            t0 = time.perf_counter()
            recall = memory.route(query)
            latencies.append(time.perf_counter() - t0)
            right += recall.decision == "graft" and recall.block.name == name
            abstained += recall.decision == "abstain"
        ood_abstained = sum(memory.route(q).decision == "abstain" for q in data["ood"]["test"])
        n_in, n_ood = len(test_in), len(data["ood"]["test"])
        ids = {b.name: b.id for b in memory.store.blocks()}
        in_best = [r[0] for r in memory.router.scores([q for q, _ in test_in])]
        ood_best = [r[0][1] for r in memory.router.scores(data["ood"]["test"])]
        sweep = []
        for threshold in (0.22, 0.24, 0.26, 0.28, 0.30, 0.32, 0.34, 0.38):
            ok = sum(1 for (bid, s), (_, name) in zip(in_best, test_in) if s >= threshold and bid == ids[name])
            sweep.append({"threshold": threshold, "in_scope_accuracy": round(ok / n_in, 4),
                          "ood_recall": round(sum(s < threshold for s in ood_best) / n_ood, 4)})
        ablation = {}
        for label, weight in (("nearest key only", 0.0), ("key centroid only", 1.0), ("mean (default)", 0.5)):
            memory.router.centroid_weight = weight
            best = [r[0][0] for r in memory.router.scores([q for q, _ in test_in])]
            ablation[label] = round(sum(b == ids[name] for b, (_, name) in zip(best, test_in)) / n_in, 4)
        memory.router.centroid_weight = 0.5
        report = {
            "intents": len(intents),
            "routing_keys": len(memory.store.routing_keys()),
            "build_s": round(build_s, 1),
            "calibration": calibration,
            "test": {
                "in_domain": n_in,
                "out_of_domain": n_ood,
                "in_scope_accuracy": round(right / n_in, 4),
                "in_scope_accuracy_ci95": wilson_interval(right, n_in),
                "false_abstain": round(abstained / n_in, 4),
                "misroute": round((n_in - right - abstained) / n_in, 4),
                "ood_recall": round(ood_abstained / n_ood, 4),
                "ood_recall_ci95": wilson_interval(ood_abstained, n_ood),
                "route_ms_median": round(statistics.median(latencies) * 1000, 2),
            },
            "test_threshold_sweep": sweep,
            "test_top1_by_score": ablation,
        }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
