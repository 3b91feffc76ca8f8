"""Scale check: 150 skills with 100 example queries each, built and routed on 2 cores.

Skills and queries are synthetic (a subject crossed with templates), which is enough to
time building (block capture plus embedding 15,000 routing keys) and routing.

    .venv/bin/python benchmarks/scale_eval.py [--skills 150] [--examples 100]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from skillgraft.memory import SkillMemory

SUBJECTS = [f"{a} {b}" for a, b in itertools.product(
    ["postgres", "kafka", "nginx", "terraform", "react", "rust", "golang", "redis", "spark", "django",
     "flask", "numpy", "pandas", "kotlin", "swift", "elixir", "haskell", "ansible", "jenkins", "grafana",
     "prometheus", "vault", "consul", "helm", "istio", "celery", "airflow", "dbt", "snowflake", "bigquery"],
    ["backups", "upgrades", "performance tuning", "security hardening", "monitoring"],
)]
TEMPLATES = [
    "how do I handle {s}?", "what's the best way to do {s}", "{s} keeps failing, help", "guide me through {s}",
    "any tips on {s}?", "checklist for {s}", "explain {s} to a beginner", "common mistakes with {s}",
    "{s} step by step", "I need to set up {s} today", "what should I check before {s}", "automate {s}",
    "{s} best practices", "troubleshoot {s}", "quick question about {s}", "where do I start with {s}",
    "is there a script for {s}", "{s} in production", "how long does {s} take", "what breaks during {s}",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skills", type=int, default=150)
    parser.add_argument("--examples", type=int, default=100)
    parser.add_argument("--out", default="docs/data/scale_eval.json")
    args = parser.parse_args()
    subjects = SUBJECTS[: args.skills]
    with tempfile.TemporaryDirectory() as home, SkillMemory(home) as memory:
        memory.router.embedder.encode(["warm-up"])
        memory.engine.tokenize("warm-up")
        started = time.perf_counter()
        for subject in subjects:
            examples = [t.format(s=subject) + (f" (case {i // len(TEMPLATES)})" if i >= len(TEMPLATES) else "")
                        for i, t in zip(range(args.examples), itertools.cycle(TEMPLATES))]
            memory.add_manual(subject.replace(" ", "-"), f"Skill manual: {subject}. Follow the runbook for {subject}.",
                              examples=examples)
        build_s = time.perf_counter() - started
        queries = [f"{subject} question number {i}: what do I do first?" for i, subject in enumerate(subjects)]
        memory.route(queries[0])
        latencies, right = [], 0
        for query, subject in zip(queries, subjects):
            t0 = time.perf_counter()
            recall = memory.route(query)
            latencies.append(time.perf_counter() - t0)
            right += bool(recall.block and recall.block.name == subject.replace(" ", "-"))
        report = {
            "skills": len(subjects),
            "routing_keys": len(memory.store.routing_keys()),
            "build_s": round(build_s, 1),
            "route_ms_p50": round(1000 * statistics.median(latencies), 2),
            "route_ms_p90": round(1000 * sorted(latencies)[int(0.9 * len(latencies))], 2),
            "routed_right": right,
            "queries": len(queries),
        }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
