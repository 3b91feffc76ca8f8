"""Routing that learns: static MiniLM vs MPNet, and a predict-then-learn stream of corrections.

For each intent set (the 100-skill ``intents.json`` and the chat-style ``chat_intents.json``)
and each encoder, a store is built with one block per intent (name, description, train
utterances and the manual's sentences as keys), the abstain threshold is calibrated on the
calibration split and the test split is routed (**static**). Then the test queries, in-domain
and out-of-domain shuffled together with a fixed seed, are streamed through a fresh copy of
that store: each query is routed first (the prediction that is scored), then corrected with
``SkillMemory.feedback`` when it was misrouted, falsely abstained or wrongly grafted
(**stream**: first and second half, corrections counted). **stream+recalibrate** does the
same and recalibrates the threshold on the calibration split at the half-way point.

The block captures use the deterministic fake engine of ``skillgraft.testing``: routing reads
only the keys, so every routing number comes from the real encoder, FAISS index and SQLite
catalog; no model is prefilled (the MiniLM figures of ``routing_eval.py``, which captures on
SmolLM2, are the check that this changes nothing).

    .venv/bin/python benchmarks/routing_learning.py --set intents --embedder minilm \\
        --out docs/data/routing_learning_intents_minilm.json
    .venv/bin/python benchmarks/routing_learning.py --table docs/data/routing_learning_*.json
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from math import comb
from pathlib import Path

import numpy as np

from skillgraft.memory import SkillMemory
from skillgraft.routing.encoders import make_embedder
from skillgraft.core.measures import wilson
from skillgraft.testing import FakeEngine

from reports import write_report

DATA = Path(__file__).parent / "data"


def build(home: Path, data: dict, embedder) -> SkillMemory:
    memory = SkillMemory(home, engine=FakeEngine(n_ctx=16_384), embedder=embedder)
    for name, intent in data["intents"].items():
        memory.add_manual(name, intent["manual"], description=intent["description"], examples=intent["train"])
    memory.calibrate([(q, n) for n, i in data["intents"].items() for q in i["calibration"]], data["ood"]["calibration"])
    return memory


def correct(recall, expected) -> bool:
    """Right block grafted, or abstained on an out-of-domain query (``expected`` None)."""
    if expected is None:
        return recall.decision == "abstain"
    return recall.decision == "graft" and recall.block.name == expected


def rates(outcomes: list[tuple[object, bool]]) -> dict:
    """In-scope accuracy and out-of-domain recall of ``[(expected, right), ...]``."""
    in_domain = [ok for expected, ok in outcomes if expected is not None]
    ood = [ok for expected, ok in outcomes if expected is None]
    return {
        "in_scope_accuracy": round(sum(in_domain) / len(in_domain), 4) if in_domain else None,
        "in_scope_ci95": wilson(sum(in_domain), len(in_domain), places=4),
        "ood_recall": round(sum(ood) / len(ood), 4) if ood else None,
        "ood_ci95": wilson(sum(ood), len(ood), places=4),
        "in_domain": len(in_domain),
        "out_of_domain": len(ood),
    }


def static(memory: SkillMemory, data: dict) -> dict:
    tests = [(q, n) for n, i in data["intents"].items() for q in i["test"]] + [(q, None) for q in data["ood"]["test"]]
    outcomes = [(expected, correct(memory.route(q), expected)) for q, expected in tests]
    in_queries = [(q, n) for q, n in tests if n is not None]
    best = memory.router.scores([q for q, _ in in_queries])
    ids = {b.name: b.id for b in memory.blocks.list()}
    top1 = [bool(r) and r[0][0] == ids[n] for r, (_, n) in zip(best, in_queries)]
    report = rates(outcomes)
    report.update(threshold=round(memory.router.threshold, 4), top1=round(sum(top1) / len(top1), 4))
    by_query = {f"{expected}\t{q}": ok for (q, expected), (_, ok) in zip(tests, outcomes)}
    return {"summary": report, "decisions": [ok for _, ok in outcomes], "top1": top1, "by_query": by_query}


def stream(memory: SkillMemory, data: dict, seed: int, recalibrate: bool, baseline: dict) -> dict:
    """The predict-then-learn stream; ``baseline`` (query to static outcome) scores the same
    halves without corrections."""
    queries = [(q, n) for n, i in data["intents"].items() for q in i["test"]] + [(q, None) for q in data["ood"]["test"]]
    random.Random(seed).shuffle(queries)
    half = len(queries) // 2
    static_outcomes = [(n, baseline[f"{n}\t{q}"]) for q, n in queries]
    outcomes, corrections, kinds, first = [], 0, {"feedback": 0, "negative": 0}, 0
    for position, (query, expected) in enumerate(queries):
        if position == half:
            first = corrections
        if recalibrate and position == half:
            memory.calibrate([(q, n) for n, i in data["intents"].items() for q in i["calibration"]], data["ood"]["calibration"])
        recall = memory.route(query)
        ok = correct(recall, expected)
        outcomes.append((expected, ok))
        if not ok:
            result = memory.feedback(query, expected)
            if result.kind != "none":
                corrections += 1
                kinds[result.kind] += 1
    return {
        "queries": len(queries),
        "corrections": corrections,
        "corrections_by_kind": kinds,
        "corrections_in_first_half": first,
        "first_half": rates(outcomes[:half]),
        "second_half": rates(outcomes[half:]),
        "without_corrections": {"first_half": rates(static_outcomes[:half]), "second_half": rates(static_outcomes[half:])},
        "threshold_after": round(memory.router.threshold, 4),
    }


def latency(memory: SkillMemory, data: dict, repeats: int = 200) -> dict:
    queries = [q for i in data["intents"].values() for q in i["test"]]
    memory.route(queries[0])
    times = []
    for i in range(repeats):
        started = time.perf_counter()
        memory.route(queries[i % len(queries)])
        times.append(time.perf_counter() - started)
    return {"route_ms_p50": round(statistics.median(times) * 1000, 2),
            "route_ms_p95": round(float(np.percentile(times, 95)) * 1000, 2), "routes": repeats}


def mcnemar(a: list[bool], b: list[bool]) -> dict:
    """Exact two-sided McNemar test on paired outcomes: discordant counts and p-value."""
    only_a = sum(x and not y for x, y in zip(a, b))
    only_b = sum(y and not x for x, y in zip(a, b))
    n, k = only_a + only_b, min(only_a, only_b)
    p = min(1.0, 2 * sum(comb(n, i) for i in range(k + 1)) / 2 ** n) if n else 1.0
    return {"only_first": only_a, "only_second": only_b, "p_value": p}


def table(paths: list[str]) -> str:
    """The docs' markdown table from reports of this script (MiniLM and MPNet per set), with
    exact McNemar tests of MPNet against MiniLM on the paired test decisions and top-1."""
    reports = [json.loads(Path(p).read_text()) for p in paths]
    lines = ["| set | encoder | static in-scope | static OOD recall | top-1 | stream 2nd half in-scope (without) "
             "| stream 2nd half OOD recall (without) | corrections | McNemar p vs MiniLM (decisions, top-1) |",
             "|---|---|---|---|---|---|---|---|---|"]
    baseline = {r["set"]: r for r in reports if r["embedder"] == "all-MiniLM-L6-v2"}
    pct = lambda x: f"{100 * x:.1f}%"  # noqa: E731
    for r in reports:
        s, t = r["static"]["summary"], r["stream"]
        w = t["without_corrections"]["second_half"]
        base = baseline.get(r["set"])
        test = "" if base is None or base is r else (
            f"{mcnemar(r['static']['decisions'], base['static']['decisions'])['p_value']:.3g}, "
            f"{mcnemar(r['static']['top1'], base['static']['top1'])['p_value']:.3g}")
        lines.append(
            f"| {r['set']} | {r['embedder']} | {pct(s['in_scope_accuracy'])} | {pct(s['ood_recall'])} | {pct(s['top1'])} "
            f"| {pct(t['second_half']['in_scope_accuracy'])} ({pct(w['in_scope_accuracy'])}) "
            f"| {pct(t['second_half']['ood_recall'])} ({pct(w['ood_recall'])}) "
            f"| {t['corrections']} ({t['corrections_by_kind']['feedback']} keys, {t['corrections_by_kind']['negative']} negatives) "
            f"| {test} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=["intents", "chat_intents"])
    parser.add_argument("--embedder", help="minilm, mpnet, a folder or an http(s):// endpoint")
    parser.add_argument("--seed", type=int, default=25)
    parser.add_argument("--out")
    parser.add_argument("--table", nargs="+", metavar="REPORT", help="print the docs' table from these reports")
    args = parser.parse_args()
    if args.table:
        print(table(args.table))
        return 0
    if not (args.set and args.embedder and args.out):
        parser.error("--set, --embedder and --out are required (or --table REPORT...)")
    data = json.loads((DATA / f"{args.set}.json").read_text())
    embedder = make_embedder(args.embedder)
    report: dict = {"set": args.set, "intents": len(data["intents"]), "embedder": embedder.name}
    with tempfile.TemporaryDirectory() as work:
        started = time.perf_counter()
        built = Path(work) / "built"
        memory = build(built, data, embedder)
        report["build_s"] = round(time.perf_counter() - started, 1)
        report["routing_keys"] = len(memory.store.routing_keys())
        report["embedder_runtime"] = getattr(embedder, "runtime_used", None)
        report["static"] = static(memory, data)
        report["latency"] = latency(memory, data)
        memory.close()
        for label, recalibrate in (("stream", False), ("stream_recalibrated", True)):
            shutil.copytree(built, Path(work) / label)
            with SkillMemory(Path(work) / label, engine=FakeEngine(n_ctx=16_384), embedder=embedder) as fresh:
                report[label] = stream(fresh, data, args.seed, recalibrate, report["static"]["by_query"])
        del report["static"]["by_query"]
    return write_report(report, args.out)


if __name__ == "__main__":
    sys.exit(main())
