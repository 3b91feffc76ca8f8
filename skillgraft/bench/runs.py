"""Cost and exactness benchmarks behind ``skillgraft bench KIND``.

Every ratio is measured side by side in one run on one machine: a warm-up first, then the
median of ``repeats`` repetitions. Each function returns ``{"rows": [...], ...}`` with the
machine, model and versions recorded next to the numbers.
"""

from __future__ import annotations

from ..core.progress import Progress

import os
import platform
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..config import engine_settings
from ..engine.llama import Engine, build_info
from ..verify.exactness import CORPUS, Comparison, sample_prefix, sample_query



def machine() -> dict:
    """What the numbers were measured on."""
    info = build_info()
    return {
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "llama_cpp_python": info["llama_cpp_python"],
        "system_info": info["system_info"],
    }


def corpus_tokens(engine: Engine, n_tokens: int) -> list[int]:
    """``n_tokens`` deterministic tokens of prose."""
    text = " ".join(CORPUS)
    tokens = engine.tokenize(text)
    while len(tokens) < n_tokens:
        text += " " + " ".join(reversed(CORPUS)) + f" Part {len(tokens)}."
        tokens = engine.tokenize(text)
    return tokens[:n_tokens]


def _times(action: Callable[[], object], repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return times


def _median_time(action: Callable[[], object], repeats: int) -> float:
    return statistics.median(_times(action, repeats))


def _context_for(n_tokens: int) -> int:
    return ((n_tokens + 64) // 256 + 1) * 256


# -- graft and paging ---------------------------------------------------------------------


def bench_graft(
    model: str,
    sizes: Sequence[int] = (256, 1024, 2048, 4096, 8192),
    repeats: int = 3,
    *,
    peers: bool = True,
    progress: Progress = None,
) -> dict:
    """Cold prefill vs our restore vs the native floor vs llama-cpp-python's state APIs.

    The first access goes through the store's read path (read, size and digest checked,
    restore), with the block evicted from the store's cache before each repetition.
    """
    from ..store.block_store import BlockStore
    from .peers import high_level_state

    rows = []
    for done, size in enumerate(sizes, 1):
        settings = engine_settings(n_ctx=_context_for(size))
        with Engine(model, settings) as engine, tempfile.TemporaryDirectory(prefix="skillgraft-bench-") as folder:
            tokens = corpus_tokens(engine, size)
            engine.prefill(tokens[:32])  # warm-up
            prefills = _times(lambda: engine.prefill(tokens), repeats)
            state = engine.capture(tokens)
            store = BlockStore(Path(folder) / "store")
            block, _ = store.put(state, name=f"graft-{size}", kind="manual", source=f"{size} tokens")
            native_file = Path(folder) / "native.state"
            engine.save_state_file(native_file, tokens)
            one = tokens[-1:]

            def first_access() -> None:  # the store's read path: read, size and digest checked, restore
                store.evict(block.sha256)
                loaded = store.load_state(block)
                if loaded.from_cache:
                    raise AssertionError("the first access was served from the cache")
                engine.restore(loaded.state, block.id, verify_hash=False)

            def restore_plus_one() -> None:
                engine.restore(state, verify_hash=False)
                engine.append(one)

            for action in (first_access, restore_plus_one):  # warm-up
                action()
            restores = [engine.restore(state, verify_hash=False) for _ in range(repeats)]
            plus_one = _times(restore_plus_one, repeats)
            floors = [engine.load_state_file(native_file, size) for _ in range(repeats)]
            firsts = _times(first_access, repeats)
            store.close()
            row = {
                "tokens": size,
                "prefill_s": statistics.median(prefills),
                "restore_s": statistics.median(restores),
                "restore_first_access_s": statistics.median(firsts),
                "first_access_vs_floor_range": [min(firsts) / max(floors), max(firsts) / min(floors)],
                "first_access_digest": "BLAKE3" if block.blake3 else "SHA-256",
                "restore_plus_one_s": statistics.median(plus_one),
                "floor_s": statistics.median(floors),
                "speedup_range": [min(prefills) / max(plus_one), max(prefills) / min(plus_one)],
                "restore_vs_floor_range": [min(restores) / max(floors), max(restores) / min(floors)],
                "bytes": state.n_bytes,
                "bytes_per_token": state.n_bytes / size,
                "native_file_bytes": native_file.stat().st_size,
            }
            row["speedup"] = row["prefill_s"] / row["restore_plus_one_s"]
            row["restore_vs_floor"] = row["restore_s"] / row["floor_s"]
            row["first_access_vs_floor"] = row["restore_first_access_s"] / row["floor_s"]
            if peers:
                peer = high_level_state(engine.model_path, settings, tokens, repeats)
                row.update({f"llama_cpp_python_{k}": v for k, v in peer.items()})
                row["vs_llama_cpp_python_load_state"] = peer["load_state_s"] / row["restore_s"]
                low, high = peer["load_state_range_s"]
                row["vs_llama_cpp_python_load_state_range"] = [low / max(restores), high / min(restores)]
                row["vs_llama_cpp_python_disk_cache"] = peer["disk_cache_load_s"] / row["restore_s"]
            rows.append(row)
        if progress:
            progress(done, len(sizes))
    return {"kind": "graft", "model": model, "repeats": repeats, "machine": machine(), "rows": rows}


def bench_paging(model: str, sizes: Sequence[int] = (256, 1024, 4096), repeats: int = 3, progress: Progress = None) -> dict:
    """First access (read + digest check + restore) vs warm restore (LRU hit) vs re-prefill, through the store."""
    from ..store.block_store import BlockStore

    rows = []
    for done, size in enumerate(sizes, 1):
        settings = engine_settings(n_ctx=_context_for(size))
        with Engine(model, settings) as engine, tempfile.TemporaryDirectory(prefix="skillgraft-bench-") as home:
            store = BlockStore(home)
            tokens = corpus_tokens(engine, size)
            block, _ = store.put(engine.capture(tokens), name=f"page-{size}", kind="manual", source=f"{size} tokens")
            first, warm = [], []
            for _ in range(repeats):
                store.evict(block.sha256)
                loaded = store.load_state(block)
                first.append(loaded.read_s + engine.restore(loaded.state, block.id, verify_hash=False))
                again = store.load_state(block)
                warm.append(again.read_s + engine.restore(again.state, block.id, verify_hash=False))
            reprefill = _median_time(lambda: engine.prefill(tokens), repeats)
            rows.append({
                "tokens": size,
                "first_access_s": statistics.median(first),
                "warm_restore_s": statistics.median(warm),
                "reprefill_s": reprefill,
                "first_vs_warm": statistics.median(first) / statistics.median(warm),
                "reprefill_vs_first": reprefill / statistics.median(first),
            })
            store.close()
        if progress:
            progress(done, len(sizes))
    return {"kind": "paging", "model": model, "repeats": repeats, "machine": machine(), "rows": rows}


# -- positions ----------------------------------------------------------------------------


def bench_positions(
    model: str, samples: int = 50, offsets: Sequence[int] = (8, 128, 1024), seed: int = 0, progress: Progress = None
) -> dict:
    """Own position, K-shifted grafts vs fresh-at-offset, the no-graft control, sequential composition."""
    settings = engine_settings(n_ctx=2048)
    rows = []
    with Engine(model, settings) as engine:
        own = Comparison()
        shifted = {o: Comparison() for o in offsets}
        control = {o: Comparison() for o in offsets}
        sequential = Comparison()
        for i in range(samples):
            rng = np.random.default_rng([seed, i])
            prefix = sample_prefix(engine, rng, 24, 400)
            query = sample_query(engine, rng)
            second = sample_prefix(engine, rng, 16, 120)[1:]
            state = engine.capture(prefix)
            engine.append(query)
            fresh = engine.logits()
            own.add(fresh, engine.graft(state, query))
            for offset in offsets:
                engine.reset()
                engine.prefill(prefix, start=offset)
                engine.append(query)
                fresh_at_offset = engine.logits()
                control[offset].add(fresh, fresh_at_offset)
                engine.restore(state)
                engine.shift_positions(offset)
                engine.append(query)
                shifted[offset].add(fresh_at_offset, engine.logits())
            engine.prefill(list(prefix) + list(second))
            engine.append(query)
            together = engine.logits()
            engine.restore(state)
            engine.append(second)
            engine.append(query)
            sequential.add(together, engine.logits())
            if progress:
                progress(i + 1, samples)
    rows.append({"case": "own position", "offset": 0, **own.summary()})
    for offset in offsets:
        rows.append({"case": "shifted graft vs fresh at offset", "offset": offset, **shifted[offset].summary()})
        rows.append({"case": "control: fresh at 0 vs fresh at offset", "offset": offset, **control[offset].summary()})
    rows.append({"case": "sequential: restore A, prefill B vs fresh A+B", "offset": 0, **sequential.summary()})
    return {"kind": "positions", "model": model, "samples": samples, "machine": machine(), "rows": rows}


# -- routing ------------------------------------------------------------------------------


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


def bench_route(sizes: Sequence[int] = (1000, 10000, 100000), queries: int = 200, seed: int = 0, progress: Progress = None) -> dict:
    """Whole-route latency (query embedding + FAISS search), flat vs HNSW, with HNSW's recall@1.

    Keys are unit vectors near 384-d MiniLM embeddings of the built-in corpus (so the
    geometry is realistic without embedding 100k sentences). Each timed route embeds a
    distinct one-sentence query on the real embedder and searches the index with it;
    recall@1 of HNSW against flat is measured on perturbed keys.
    """
    from ..routing.router import Embedder, KeyIndex

    embedder = Embedder()
    base = embedder.encode(list(CORPUS))
    embedder.encode(["warm-up"])
    texts = [f"{ROUTE_QUERIES[i % len(ROUTE_QUERIES)]} ({i})" for i in range(queries)]
    reference = Embedder(runtime="sentence-transformers")
    reference.encode(["warm-up"])
    embed_times, reference_times = [], []
    for i in range(40):  # interleaved, so both see the same load
        embed_times += _times(lambda: embedder.encode([texts[i % len(texts)]]), 1)
        reference_times += _times(lambda: reference.encode([texts[i % len(texts)]]), 1)
    rng = np.random.default_rng(seed)
    rows = []
    for done, size in enumerate(sizes, 1):
        keys = base[rng.integers(len(base), size=size)] + rng.normal(0, 0.12, (size, base.shape[1])).astype(np.float32)
        keys /= np.linalg.norm(keys, axis=1, keepdims=True)
        picks = rng.integers(size, size=queries)
        probe = keys[picks] + rng.normal(0, 0.05, (queries, keys.shape[1])).astype(np.float32)
        probe = np.ascontiguousarray(probe / np.linalg.norm(probe, axis=1, keepdims=True), dtype=np.float32)
        block_ids = [f"b{i % max(1, size // 100)}" for i in range(size)]
        results = {}
        for approximate in (False, True):
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
                index.search(embedder.encode([text]))
                routes.append(time.perf_counter() - t0)
            results[approximate] = (build_s, latencies, found, routes)
        flat_found = results[False][2]
        for approximate, (build_s, latencies, found, routes) in results.items():
            rows.append({
                "keys": size,
                "index": "hnsw" if approximate else "flat",
                "build_s": build_s,
                "search_p50_ms": 1000 * float(np.percentile(latencies, 50)),
                "search_p99_ms": 1000 * float(np.percentile(latencies, 99)),
                "route_p50_ms": 1000 * float(np.percentile(routes, 50)),
                "route_p90_ms": 1000 * float(np.percentile(routes, 90)),
                "route_p99_ms": 1000 * float(np.percentile(routes, 99)),
                "recall_at_1_vs_flat": float(np.mean(np.array(found) == np.array(flat_found))),
            })
        if progress:
            progress(done, len(sizes))
    return {
        "kind": "route",
        "embedder_runtime": embedder.runtime_used,
        "embed_query_ms": 1000 * statistics.median(embed_times),
        "embed_query_ms_range": [1000 * min(embed_times), 1000 * max(embed_times)],
        "embed_query_ms_sentence_transformers": 1000 * statistics.median(reference_times),
        "embed_speedup_vs_sentence_transformers": statistics.median(reference_times) / statistics.median(embed_times),
        "queries": queries,
        "machine": machine(),
        "rows": rows,
    }


# -- needles ------------------------------------------------------------------------------

# Facts a 135M model copies: a plain attribute and a number or a word. Facts that touch its
# priors (a "safe code", a "password") get an explanation instead of the fact.
NEEDLES = (
    ("The access code for vault seven is 4512.", "What is the access code for vault seven?", "4512"),
    ("The lighthouse keeper's boat number is 7261.", "What is the lighthouse keeper's boat number?", "7261"),
    ("The secret ingredient of the harbour soup is smoked paprika.", "What is the secret ingredient of the harbour soup?", "paprika"),
    ("The ticket code for the Oldport ferry is 3856.", "What is the ticket code for the Oldport ferry?", "3856"),
    ("The locker number of the night porter is 2971.", "What is the locker number of the night porter?", "2971"),
    ("The museum's oldest clock was built in 1642.", "In which year was the museum's oldest clock built?", "1642"),
    ("The room number of the chess club is 318.", "What is the room number of the chess club?", "318"),
)


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench_needles(
    model: str, blocks: int = 64, block_tokens: int = 1024, window: int = 2048, progress: Progress = None
) -> dict:
    """A store far larger than the serving window, with needles planted at depths across it."""
    from ..memory import SkillMemory

    rng = np.random.default_rng(0)
    depths = np.linspace(0, blocks - 1, len(NEEDLES)).astype(int)
    planted = {int(d): needle for d, needle in zip(depths, NEEDLES)}
    settings = engine_settings(n_ctx=window)
    with tempfile.TemporaryDirectory(prefix="skillgraft-needles-") as home, SkillMemory(home, model=model, settings=settings) as memory:
        memory.store.cache_bytes = 256 << 20
        engine = memory.engine
        started = time.perf_counter()
        rss = []
        for i in range(blocks):
            sentences = [CORPUS[j] for j in rng.permutation(len(CORPUS))]
            text = f"Section {i}. " + " ".join(sentences)
            while len(engine.tokenize(text)) < block_tokens - 40:
                text += " " + " ".join(CORPUS[j] for j in rng.permutation(len(CORPUS)))
            budget = block_tokens - 60
            body = engine.detokenize(engine.tokenize(text, add_bos=False)[:budget])
            keys = [f"section {i}"]
            if i in planted:
                fact, _, _ = planted[i]
                cut = body.rfind(". ", 0, int(len(body) * float(rng.uniform(0.2, 0.8)))) + 2
                body = body[:cut] + fact + " " + body[cut:]
                keys.append(fact)
            memory.add_manual(f"section-{i}", body, examples=keys)
            if progress:
                progress(i + 1, blocks + len(NEEDLES))
        build_s = time.perf_counter() - started
        total_tokens = sum(b.n_tokens for b in memory.store.blocks())
        disk_bytes = sum(p.stat().st_size for p in (memory.store.blocks_dir).iterdir())
        rows = []
        for n, (depth, (fact, question, answer)) in enumerate(sorted(planted.items()), 1):
            result = memory.generate(question, max_tokens=24, gate=False)
            rows.append({
                "depth_block": depth,
                "question": question,
                "expected": answer,
                "routed_to": result.recall.block.name if result.recall.block else None,
                "routed_right": bool(result.recall.block and result.recall.block.name == f"section-{depth}"),
                "found": answer.lower() in result.text.lower(),
                "answer": result.text,
                "graft_s": result.timings.graft_s,
                "load_s": result.timings.load_s,
            })
            rss.append(_rss_mb())
            if progress:
                progress(blocks + n, blocks + len(NEEDLES))
        # Touch every block once more: memory must stay bounded by the LRU cache, not the store.
        for block in memory.store.blocks():
            memory.engine.restore(memory.store.load_state(block).state, block.id, verify_hash=False)
        rss.append(_rss_mb())
    return {
        "kind": "needles",
        "model": model,
        "blocks": blocks,
        "window": window,
        "stored_tokens": total_tokens,
        "store_vs_window": total_tokens / window,
        "disk_bytes": disk_bytes,
        "build_s": build_s,
        "found": sum(r["found"] for r in rows),
        "routed_right": sum(r["routed_right"] for r in rows),
        "asked": len(rows),
        "rss_mb_after_questions": rss[:-1],
        "rss_mb_after_touching_every_block": rss[-1],
        "machine": machine(),
        "rows": rows,
    }
