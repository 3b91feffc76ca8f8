"""Route latency of several encoders side by side: one-sentence query, 10k keys, interleaved.

For each encoder (a spec: minilm, mpnet, a folder or an http(s):// endpoint) a flat key index
of ``--keys`` keys is built near that encoder's embeddings of the built-in corpus (as
``skillgraft bench route`` does); then ``--routes`` whole routes (embed one distinct
sentence, search the index) are timed round-robin across the encoders, so all of them see the
same load on a shared machine. Reports p50/p95 per encoder and the ratio to the first.

    .venv/bin/python benchmarks/encoder_latency.py minilm mpnet --out docs/data/encoder_latency.json
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from skillgraft.bench.route import ROUTE_QUERIES
from skillgraft.bench.runs import machine
from skillgraft.routing.encoders import make_embedder
from skillgraft.routing.key_index import KeyIndex
from skillgraft.verify.exactness import CORPUS

from reports import write_report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("encoders", nargs="+")
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--routes", type=int, default=200)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    setups = []
    for spec in args.encoders:
        encoder = make_embedder(spec)
        base = encoder.encode(list(CORPUS))
        keys = base[rng.integers(len(base), size=args.keys)] + rng.normal(0, 0.12, (args.keys, base.shape[1])).astype(np.float32)
        keys /= np.linalg.norm(keys, axis=1, keepdims=True)
        index = KeyIndex(np.ascontiguousarray(keys, dtype=np.float32), [f"b{i:07d}" for i in range(args.keys)])
        encoder.encode(["warm-up"])
        setups.append((spec, encoder, index, []))
    for i in range(args.routes):
        text = f"{ROUTE_QUERIES[i % len(ROUTE_QUERIES)]} ({i})"
        for _, encoder, index, times in setups:
            started = time.perf_counter()
            index.search(encoder.encode([text]))
            times.append(time.perf_counter() - started)
    first = float(np.median(setups[0][3]))
    rows = [{"encoder": spec, "name": encoder.name, "runtime": getattr(encoder, "runtime_used", None),
             "route_p50_ms": round(1000 * float(np.median(times)), 2),
             "route_p95_ms": round(1000 * float(np.percentile(times, 95)), 2),
             "ratio_to_first": round(float(np.median(times)) / first, 2)} for spec, encoder, _, times in setups]
    load = open("/proc/loadavg").read().split()[:3] if sys.platform == "linux" else None
    return write_report({"keys": args.keys, "routes": args.routes, "load_average": load, "machine": machine(),
                         "rows": rows}, args.out)


if __name__ == "__main__":
    sys.exit(main())
