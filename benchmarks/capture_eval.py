"""Capture throughput: a store of many small manuals, and where its build time goes.

Adds each skill's manual from benchmarks/data/intents.json (its name, description, train
utterances and the manual's sentences as keys, as the routing evaluation does) and splits the
build time into prefill plus state copy (the engine's capture), storing (hashes, file, catalog
row) and routing keys (embedding, catalog rows).

    .venv/bin/python benchmarks/capture_eval.py [--skills 100] [--out docs/data/capture_eval.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from skillgraft.memory import SkillMemory

from reports import write_report

DATA = Path(__file__).parent / "data" / "intents.json"


class _Timed:
    """Wraps one method of an object and adds up the seconds spent in it."""

    def __init__(self, owner: object, method: str) -> None:
        self.seconds = 0.0
        inner = getattr(owner, method)

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started

        setattr(owner, method, timed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skills", type=int, default=100)
    parser.add_argument("--out", default="docs/data/capture_eval.json")
    args = parser.parse_args()
    intents = list(json.loads(DATA.read_text())["intents"].items())[: args.skills]
    with tempfile.TemporaryDirectory() as home, SkillMemory(home) as memory:
        memory.route("warm up the embedder")
        capture = _Timed(memory.engine, "capture")
        store = _Timed(memory.store, "put")
        keys = _Timed(memory.router, "add_key_sets")
        started = time.perf_counter()
        for name, intent in intents:
            memory.add_manual(name, intent["manual"], description=intent["description"], examples=intent["train"])
        build_s = time.perf_counter() - started
        tokens = sum(b.n_tokens for b in memory.store.blocks())
        report = {
            "skills": len(intents),
            "captured_tokens": tokens,
            "build_s": round(build_s, 2),
            "tokens_per_s": round(tokens / build_s, 1),
            "prefill_tokens_per_s": round(tokens / capture.seconds, 1),
            "seconds": {
                "capture (prefill + state copy)": round(capture.seconds, 2),
                "store (hashes, file, row)": round(store.seconds, 2),
                "routing keys (embedding, rows)": round(keys.seconds, 2),
                "other": round(build_s - capture.seconds - store.seconds - keys.seconds, 2),
            },
            "embedder_runtime": memory.router.embedder.runtime_used,
            "n_threads": memory.engine.settings.n_threads,
        }
    return write_report(report, args.out)


if __name__ == "__main__":
    sys.exit(main())
