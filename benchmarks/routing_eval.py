"""Routing evaluation: in-scope accuracy and out-of-domain recall on held-out queries.

Builds a store of the skills in benchmarks/data/intents.json (each skill's manual captured
on the embedded model; its name, description, train utterances and the manual's sentences as
routing keys), calibrates the abstain threshold on the calibration split, then routes the
held-out test split. Three scorers are reported on the same blocks:

- ``router``: the router's score (mean of nearest-key and key-centroid cosine), as routed;
- ``router_without_manual_keys``: the same with the manual-sentence keys removed (the keys
  the router had before manuals gave keys), calibrated again;
- ``head``: a softmax head fitted per store on the latter key vectors (one class per block, a
  cosine classifier initialised at the key centroids), its scale and L2 weight chosen on the
  calibration split; abstain when its top probability is below a threshold calibrated the
  same way.

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

import numpy as np

from skillgraft.routing.embedder import Embedder
from skillgraft.memory import SkillMemory
from skillgraft.core.measures import wilson
from skillgraft.routing.router import evaluate_threshold

from reports import write_report

DATA = Path(__file__).parent / "data" / "intents.json"
SWEEP = (0.24, 0.26, 0.28, 0.30, 0.32, 0.34, 0.36, 0.40)


def load_data() -> dict:
    """The 100-skill set: ``intents`` (name -> description, manual, train / calibration / test
    utterances) and ``ood`` (calibration / test out-of-domain requests)."""
    return json.loads(DATA.read_text())


def add_skills(memory: SkillMemory, intents: dict) -> float:
    """One block per skill: its manual captured, its description and train utterances as keys.
    Returns the seconds it took."""
    started = time.perf_counter()
    for name, intent in intents.items():
        memory.add_manual(name, intent["manual"], description=intent["description"], examples=intent["train"])
    return time.perf_counter() - started


def fit_head(keys: np.ndarray, labels: np.ndarray, n_blocks: int, scale: float, l2: float, steps: int = 300):
    """Softmax regression on unit key vectors: logits = scale * x @ W + b, W starts at the centroids."""
    centroids = np.zeros((n_blocks, keys.shape[1]))
    np.add.at(centroids, labels, keys)
    weights = (centroids / np.linalg.norm(centroids, axis=1, keepdims=True)).T
    bias = np.zeros(n_blocks)
    target = np.eye(n_blocks)[labels]
    for _ in range(steps):
        probs = _softmax(scale * keys @ weights + bias)
        grad = (probs - target) / len(keys)
        weights -= 0.5 * (scale * keys.T @ grad + l2 * weights)
        bias -= 0.5 * grad.sum(axis=0)
    return lambda vectors: _softmax(scale * vectors @ weights + bias)


def _softmax(logits: np.ndarray) -> np.ndarray:
    logits = logits - logits.max(axis=1, keepdims=True)
    out = np.exp(logits)
    return out / out.sum(axis=1, keepdims=True)


def calibrated(in_best, targets, ood_best, tolerance: float = 0.02) -> tuple[float, dict]:
    """The router's rule: among thresholds within ``tolerance`` of the best in-scope accuracy,
    the one abstaining on the most out-of-domain queries."""
    candidates = sorted({round(s, 4) for _, s in in_best} | {round(float(s) + 1e-4, 4) for s in ood_best})
    curve = [(t, evaluate_threshold(t, in_best, targets, ood_best)) for t in candidates]
    floor = max(s["in_scope_accuracy"] for _, s in curve) - tolerance
    return max(((t, s) for t, s in curve if s["in_scope_accuracy"] >= floor - 1e-12),
               key=lambda item: (item[1]["ood_recall"], -item[0]))


def head_scorer(memory: SkillMemory, data: dict, ids: dict) -> dict:
    """Fit the head on the store's keys, choose its settings and threshold on calibration, score test."""
    blocks = sorted(ids.values())
    position = {b: i for i, b in enumerate(blocks)}
    rows = memory.store.routing_keys()
    keys = np.stack([np.frombuffer(r["vector"], dtype=np.float32) for r in rows]).astype(np.float64)
    labels = np.array([position[r["block_id"]] for r in rows])
    embed = memory.router.embedder.encode
    intents = data["intents"]
    split = {name: [(q, position[ids[n]]) for n, i in intents.items() for q in i[name]] for name in ("calibration", "test")}
    vectors = {name: embed([q for q, _ in pairs]).astype(np.float64) for name, pairs in split.items()}
    ood = {name: embed(data["ood"][name]).astype(np.float64) for name in ("calibration", "test")}

    def best(probs):
        return [(int(p.argmax()), float(p.max())) for p in probs]

    choices = []
    for scale in (10.0, 20.0, 30.0):
        for l2 in (1e-4, 1e-3, 1e-2):
            started = time.perf_counter()
            head = fit_head(keys, labels, len(blocks), scale, l2)
            fit_s = time.perf_counter() - started
            threshold, stats = calibrated(best(head(vectors["calibration"])), [t for _, t in split["calibration"]],
                                          np.array([p.max() for p in head(ood["calibration"])]))
            choices.append((stats["in_scope_accuracy"], stats["ood_recall"], scale, l2, threshold, head, fit_s))
    accuracy, recall, scale, l2, threshold, head, fit_s = max(choices, key=lambda c: (c[0], c[1]))
    targets = [t for _, t in split["test"]]
    test = evaluate_threshold(threshold, best(head(vectors["test"])), targets, np.array([p.max() for p in head(ood["test"])]))
    top1 = float(np.mean([p.argmax() == t for p, t in zip(head(vectors["test"]), targets)]))
    return {"scale": scale, "l2": l2, "fit_s": round(fit_s, 3), "threshold": round(float(threshold), 4),
            "calibration": {"in_scope_accuracy": accuracy, "ood_recall": recall}, "test": test,
            "test_top1": round(top1, 4)}


def runtime_agreement(memory: SkillMemory, queries: list[str]) -> dict:
    """The same routes with the query embedded by sentence-transformers instead of ONNX Runtime."""
    onnx = memory.router.scores(queries)
    memory.router.embedder = Embedder(runtime="sentence-transformers")
    reference = memory.router.scores(queries)
    return {
        "queries": len(queries),
        "same_top_block": sum(a[0][0] == b[0][0] for a, b in zip(onnx, reference)),
        "max_score_difference": float(max(abs(a[0][1] - b[0][1]) for a, b in zip(onnx, reference))),
    }


def measure(memory: SkillMemory, data: dict, ids: dict) -> dict:
    """Calibrate on the calibration split, then route the test split; the sweep and score ablation."""
    intents = data["intents"]
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
    in_best = [r[0] for r in memory.router.scores([q for q, _ in test_in])]
    ood_best = [r[0][1] for r in memory.router.scores(data["ood"]["test"])]
    sweep = []
    for threshold in SWEEP:
        ok = sum(1 for (bid, s), (_, name) in zip(in_best, test_in) if s >= threshold and bid == ids[name])
        sweep.append({"threshold": threshold, "in_scope_accuracy": round(ok / n_in, 4),
                      "ood_recall": round(sum(s < threshold for s in ood_best) / n_ood, 4)})
    ablation = {}
    for label, weight in (("nearest key only", 0.0), ("key centroid only", 1.0), ("mean (default)", 0.5)):
        memory.router.centroid_weight = weight
        best = [r[0][0] for r in memory.router.scores([q for q, _ in test_in])]
        ablation[label] = round(sum(b == ids[name] for b, (_, name) in zip(best, test_in)) / n_in, 4)
    memory.router.centroid_weight = 0.5
    return {
        "routing_keys": len(memory.store.routing_keys()),
        "calibration": calibration.as_dict(),
        "test": {
            "in_domain": n_in,
            "out_of_domain": n_ood,
            "in_scope_accuracy": round(right / n_in, 4),
            "in_scope_accuracy_ci95": wilson(right, n_in, places=4),
            "false_abstain": round(abstained / n_in, 4),
            "misroute": round((n_in - right - abstained) / n_in, 4),
            "ood_recall": round(ood_abstained / n_ood, 4),
            "ood_recall_ci95": wilson(ood_abstained, n_ood, places=4),
            "route_ms_median": round(statistics.median(latencies) * 1000, 2),
            "route_ms_p90": round(float(np.percentile(latencies, 90)) * 1000, 2),
        },
        "test_threshold_sweep": sweep,
        "test_top1_by_score": ablation,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/data/routing_eval.json")
    args = parser.parse_args()
    data = load_data()
    intents = data["intents"]
    with tempfile.TemporaryDirectory() as home, SkillMemory(home) as memory:
        build_s = add_skills(memory, intents)
        captured_tokens = sum(b.n_tokens for b in memory.store.blocks())
        ids = {b.name: b.id for b in memory.store.blocks()}
        with_manual = measure(memory, data, ids)
        agreement = runtime_agreement(memory, [q for name, i in intents.items() for q in i["test"]] + data["ood"]["test"])
        memory.router.embedder = Embedder()
        for block_id in ids.values():
            memory.store.delete_routing_keys(block_id, kind="manual")
        without_manual = measure(memory, data, ids)
        report = {
            "intents": len(intents),
            "build_s": round(build_s, 1),
            "captured_tokens": captured_tokens,
            "build_tokens_per_s": round(captured_tokens / build_s, 1),
            "embedder_runtime": memory.router.embedder.runtime_used,
            "router": with_manual,
            "router_without_manual_keys": without_manual,
            "head": head_scorer(memory, data, ids),
            "runtime_agreement": agreement,
        }
    return write_report(report, args.out)


if __name__ == "__main__":
    sys.exit(main())
