"""Thread count: prefill and generation speed with 1 and 2 threads, idle and under load.

llama.cpp's worker threads spin while they wait, so on a machine whose cores are busy
with other work more threads can be slower. Each configuration runs ``--repeats`` times
(median and spread reported): prefill of 512 tokens, then 32 greedy tokens. "Under load"
runs one CPU-bound process per ``--load`` beside it.

    .venv/bin/python benchmarks/threads_eval.py [--out docs/data/threads_eval.json]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time

from skillgraft.config import engine_settings
from skillgraft.core.sampling import SamplingOptions
from skillgraft.engine.llama import Engine

TEXT = "Skill manual: squashing commits with git. Run git rebase -i HEAD~N and mark the others as squash. " * 20


def _burn(stop) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def measure(threads: int, repeats: int) -> dict:
    prefill, generate = [], []
    with Engine("smollm2-135m", engine_settings(n_threads=threads)) as engine:
        tokens = engine.tokenize(TEXT)[:512]
        engine.prefill(tokens)  # warm-up
        for _ in range(repeats):
            started = time.perf_counter()
            engine.prefill(tokens)
            prefilled = time.perf_counter()
            list(engine.generate(SamplingOptions(32)))
            generate.append(time.perf_counter() - prefilled)
            prefill.append(prefilled - started)
    spread = lambda v: [round(min(v), 3), round(max(v), 3)]  # noqa: E731
    return {"prefill_s": round(statistics.median(prefill), 3), "prefill_spread": spread(prefill),
            "generate_32_s": round(statistics.median(generate), 3), "generate_spread": spread(generate)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/data/threads_eval.json")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--load", type=int, default=1, help="CPU-bound processes beside the model under load")
    args = parser.parse_args()
    rows = []
    for loaded in (False, True):
        stop = multiprocessing.Event()
        burners = [multiprocessing.Process(target=_burn, args=(stop,)) for _ in range(args.load if loaded else 0)]
        for burner in burners:
            burner.start()
        try:
            for threads in (1, 2):
                rows.append({"threads": threads, "load_processes": len(burners), **measure(threads, args.repeats)})
                print(json.dumps(rows[-1]), file=sys.stderr)
        finally:
            stop.set()
            for burner in burners:
                burner.join()
    with open(args.out, "w") as handle:
        json.dump({"cpus": os.cpu_count(), "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main()
