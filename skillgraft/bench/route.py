"""The routing benchmark behind ``skillgraft bench route``: whole-route latency (query
embedding and FAISS search), flat against HNSW, and HNSW's recall."""

from __future__ import annotations

import statistics
import time
from typing import Optional, Sequence

import numpy as np

from ..core.progress import Progress
from ..verify.exactness import CORPUS
from .runs import machine, repeat_times

__all__ = ["ROUTE_QUERIES", "bench_route"]

ROUTE_QUERIES = (
    "how do I squash my last three commits?",
    "what is 17 percent of 250",
    "translate good morning into French",
    "my pod keeps crashing after the deploy",
    "recommend a thriller novel for the beach",
    "how long should I proof sourdough overnight",
    "convert 5 miles to kilometres",
    "undo the commit I pushed by mistake",
)


def bench_route(sizes: Sequence[int] = (1000, 10000, 100000), queries: int = 200, seed: int = 0, progress: Progress = None,
                embedder: Optional[str] = None) -> dict:
    """Whole-route latency (query embedding + FAISS search), flat vs HNSW, with HNSW's recall@1.

    Keys are unit vectors near the encoder's embeddings of the built-in corpus (so the
    geometry is realistic without embedding 100k sentences). Each timed route embeds a
    distinct one-sentence query on the real encoder (``embedder``, a spec; MiniLM by
    default) and searches the index with it; recall@1 of HNSW against flat is measured on
    perturbed keys. A local encoder is also timed on sentence-transformers, interleaved.
    """
    from ..routing.encoders import make_embedder

    encoder = make_embedder(embedder or "minilm")
    base = encoder.encode(list(CORPUS))
    encoder.encode(["warm-up"])
    texts = [f"{ROUTE_QUERIES[i % len(ROUTE_QUERIES)]} ({i})" for i in range(queries)]
    embed_times, reference_times = _embed_times(encoder, texts)
    rng = np.random.default_rng(seed)
    rows = []
    for done, size in enumerate(sizes, 1):
        keys, probe = _keys_and_probes(base, size, queries, rng)
        block_ids = [f"b{i:07d}" for i in range(size)]  # each key a block: the index holds one row each
        results = {approximate: _time_index(keys, block_ids, probe, texts, encoder, approximate=approximate)
                   for approximate in (False, True)}
        flat_found = results[False][2]
        rows += [_route_row(size, approximate, *timings, flat_found) for approximate, timings in results.items()]
        if progress:
            progress(done, len(sizes))
    return {
        "kind": "route",
        "embedder": encoder.name,
        "embedder_runtime": getattr(encoder, "runtime_used", None),
        "embed_query_ms": 1000 * statistics.median(embed_times),
        "embed_query_ms_p95": 1000 * float(np.percentile(embed_times, 95)),
        "embed_query_ms_range": [1000 * min(embed_times), 1000 * max(embed_times)],
        "embed_query_ms_sentence_transformers": 1000 * statistics.median(reference_times) if reference_times else None,
        "embed_speedup_vs_sentence_transformers":
            statistics.median(reference_times) / statistics.median(embed_times) if reference_times else None,
        "queries": queries,
        "machine": machine(),
        "rows": rows,
    }


def _embed_times(encoder, texts: list[str]) -> tuple[list[float], list[float]]:
    """Seconds to embed one query on ``encoder`` and, for a local encoder, on sentence-transformers
    (none otherwise): 40 of each, interleaved so both see the same load."""
    from ..routing.router import Embedder

    reference = Embedder(encoder.name, runtime="sentence-transformers", location=encoder.location) \
        if isinstance(encoder, Embedder) else None
    if reference is not None:
        reference.encode(["warm-up"])
    embed_times, reference_times = [], []
    for i in range(40):
        embed_times += repeat_times(lambda: encoder.encode([texts[i % len(texts)]]), 1)
        if reference is not None:
            reference_times += repeat_times(lambda: reference.encode([texts[i % len(texts)]]), 1)
    return embed_times, reference_times


def _keys_and_probes(base: np.ndarray, size: int, queries: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """``size`` unit keys near the corpus embeddings ``base``, and ``queries`` unit probes near
    keys picked at random."""
    keys = base[rng.integers(len(base), size=size)] + rng.normal(0, 0.12, (size, base.shape[1])).astype(np.float32)
    keys /= np.linalg.norm(keys, axis=1, keepdims=True)
    picks = rng.integers(size, size=queries)
    probe = keys[picks] + rng.normal(0, 0.05, (queries, keys.shape[1])).astype(np.float32)
    probe = np.ascontiguousarray(probe / np.linalg.norm(probe, axis=1, keepdims=True), dtype=np.float32)
    return keys, probe


def _time_index(keys: np.ndarray, block_ids: list[str], probe: np.ndarray, texts: list[str], encoder, *,
                approximate: bool) -> tuple[float, list[float], list[int], list[float]]:
    """Build a flat or HNSW index of ``keys``: its build seconds, each probe's search seconds and
    nearest row, and each text's whole route (embedding and search) in seconds."""
    from ..routing.router import KeyIndex

    started = time.perf_counter()
    index = KeyIndex(np.ascontiguousarray(keys), block_ids, approximate=approximate)
    build_s = time.perf_counter() - started
    index.search(probe[:1])
    latencies, found, routes = [], [], []
    for q in probe:
        t0 = time.perf_counter()
        _, ids = index.search(q[None, :], k=1)
        latencies.append(time.perf_counter() - t0)
        found.append(int(ids[0][0]))
    for text in texts:
        t0 = time.perf_counter()
        index.search(encoder.encode([text]))
        routes.append(time.perf_counter() - t0)
    return build_s, latencies, found, routes


def _route_row(size: int, approximate: bool, build_s: float, latencies: list[float], found: list[int],
               routes: list[float], flat_found: list[int]) -> dict:
    return {
        "keys": size,
        "index": "hnsw" if approximate else "flat",
        "build_s": build_s,
        "search_p50_ms": 1000 * float(np.percentile(latencies, 50)),
        "search_p99_ms": 1000 * float(np.percentile(latencies, 99)),
        "route_p50_ms": 1000 * float(np.percentile(routes, 50)),
        "route_p90_ms": 1000 * float(np.percentile(routes, 90)),
        "route_p95_ms": 1000 * float(np.percentile(routes, 95)),
        "route_p99_ms": 1000 * float(np.percentile(routes, 99)),
        "recall_at_1_vs_flat": float(np.mean(np.array(found) == np.array(flat_found))),
    }
