"""The int8 runtime of the MiniLM embedder (``SKILLGRAFT_EMBEDDER_RUNTIME=onnx-int8``) against
the float export it is quantised from: a one-sentence query's encoding time, the two taken in
turn query by query on one thread, and every figure of the routing sets (``skill_keys_eval``,
``routing_learning`` on both intent sets, ``scale_eval``) run under each runtime.

    .venv/bin/python benchmarks/encoder_int8.py --sets docs/data/encoder_int8 --out docs/data/encoder_int8.json

``--sets FOLDER`` runs the sets into FOLDER unless their reports are there already (about 15
minutes on 2 cores), then compares them; the encodings are timed afresh each run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

RUNTIMES = ("onnx", "onnx-int8")
SETS = {
    "skill_keys": ["benchmarks/skill_keys_eval.py", "tests/data/agent_skills",
                   "--queries", "tests/data/agent_skills_heldout.json"],
    "learning_intents": ["benchmarks/routing_learning.py", "--set", "intents", "--embedder", "minilm"],
    "learning_chat_intents": ["benchmarks/routing_learning.py", "--set", "chat_intents", "--embedder", "minilm"],
    "scale": ["benchmarks/scale_eval.py"],
}
QUALITY = ("accuracy", "recall", "abstain", "right", "top1", "precision", "misroute", "false_")
QUERIES = [
    "How do I restore a single table from the weekly postgres dump?",
    "The TLS certificate of api.tidewater.io expires in 12 days; how do I renew it?",
    "My payments-worker pods are in CrashLoopBackOff since the last release; how do I debug it?",
    "Checkout started failing right after this morning's release. How do I roll it back?",
]


def flat(value, prefix: str = "") -> dict:
    """Every number of a report by its path (list items by their variant's names where they have them)."""
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in flat(item, f"{prefix}.{key}" if prefix else key).items()}
    if isinstance(value, list):
        out = {}
        for i, item in enumerate(value):
            name = "/".join(str(item[k]) for k in ("policy", "examples", "near_misses") if k in item) if isinstance(item, dict) else ""
            out.update(flat(item, f"{prefix}[{name or i}]"))
        return out
    return {prefix: value} if isinstance(value, (int, float)) and not isinstance(value, bool) else {}


def compare(folder: Path) -> dict:
    """Per set: its rate figures under both runtimes, how many moved by more than half a point, the largest moves."""
    result = {}
    for name in SETS:
        a, b = (flat(json.loads((folder / f"{name}_{rt}.json").read_text())) for rt in RUNTIMES)
        figures = [(k, a[k], b[k]) for k in a if k in b and "ci95" not in k and 0 <= a[k] <= 1
                   and any(q in k.rsplit(".", 1)[-1] for q in QUALITY)]
        moved = sorted(figures, key=lambda f: -abs(f[2] - f[1]))
        result[name] = {"figures": len(figures), "moved_over_half_a_point": sum(abs(y - x) > 0.005 for _, x, y in figures),
                        "largest": [{"figure": k, "onnx": x, "onnx-int8": y, "points": round(100 * (y - x), 2)}
                                    for k, x, y in moved[:5]]}
    return result


def run_sets(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for runtime in RUNTIMES:
        for name, argv in SETS.items():
            out = folder / f"{name}_{runtime}.json"
            if not out.is_file():
                print(f"{name} on {runtime}", file=sys.stderr, flush=True)
                subprocess.run([sys.executable, *argv, "--out", str(out)], check=True, stdout=subprocess.DEVNULL,
                               env={**os.environ, "SKILLGRAFT_EMBEDDER_RUNTIME": runtime})


def time_encodings(rounds: int) -> dict:
    from skillgraft.routing.embedder import Embedder

    encoders = {rt: Embedder(runtime=rt) for rt in RUNTIMES}
    for encoder in encoders.values():
        encoder.encode(["warm"])
    times: dict = {rt: [] for rt in RUNTIMES}
    for i in range(rounds):
        for rt in (RUNTIMES if i % 2 == 0 else RUNTIMES[::-1]):
            text = f"{QUERIES[i % len(QUERIES)]} ({i})"  # a new text each time: no cached vector
            started = time.perf_counter()
            encoders[rt].encode([text])
            times[rt].append(1000 * (time.perf_counter() - started))
    return {rt: {"p50_ms": round(statistics.median(v), 3), "min_ms": round(min(v), 3),
                 "p90_ms": round(sorted(v)[int(0.9 * len(v))], 3)} for rt, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", required=True, help="the folder of the routing sets' reports")
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--out")
    args = parser.parse_args()
    folder = Path(args.sets)
    run_sets(folder)
    report = {"encode": time_encodings(args.rounds), "rounds": args.rounds, "load_average": os.getloadavg(),
              "sets": compare(folder)}
    text = json.dumps(report, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
