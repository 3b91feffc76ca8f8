"""Cost and exactness benchmarks of the KV state behind ``skillgraft bench KIND``: graft,
paging and positions; routing is :mod:`skillgraft.bench.route`, the large store
:mod:`skillgraft.bench.needles`.

Every ratio is measured side by side in one run on one machine: a warm-up first, then the
median of ``repeats`` repetitions. Each function returns ``{"rows": [...], ...}`` with the
machine, model and versions recorded next to the numbers.
"""

from __future__ import annotations

import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from ..config import engine_settings, kv_type_settings
from ..core.progress import Progress
from ..engine.llama import Engine, build_info
from ..verify.exactness import CORPUS, QUERIES, Comparison, sample_prefix, sample_query


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


def repeat_times(action: Callable[[], object], repeats: int) -> list[float]:
    """The wall time of each of ``repeats`` runs of ``action``."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return times


def _median_time(action: Callable[[], object], repeats: int) -> float:
    return statistics.median(repeat_times(action, repeats))


def _context_for(n_tokens: int) -> int:
    return ((n_tokens + 64) // 256 + 1) * 256


# -- graft and paging ---------------------------------------------------------------------


def bench_graft(
    model: str,
    sizes: Sequence[int] = (256, 1024, 2048, 4096, 8192),
    repeats: int = 3,
    *,
    peers: bool = True,
    kv_type: Optional[str] = None,
    progress: Progress = None,
) -> dict:
    """Cold prefill vs our restore vs the native floor vs llama-cpp-python's state APIs.

    The first access goes through the store's read path (read, size and digest checked,
    restore), with the block evicted from the store's cache before each repetition.
    ``kv_type`` runs it all under that KV cache type (:func:`~skillgraft.config.kv_type_settings`).
    Each row also says whether a query's logits after the restore are SHA-equal to its
    logits after the prefill (``exact``).
    """
    rows, kv = [], _kv_report(kv_type)
    for done, size in enumerate(sizes, 1):
        settings = engine_settings(n_ctx=_context_for(size), **kv_type_settings(kv_type))
        with Engine(model, settings) as engine, tempfile.TemporaryDirectory(prefix="skillgraft-bench-") as folder:
            rows.append(_graft_row(engine, settings, size, repeats, Path(folder), peers=peers))
        if progress:
            progress(done, len(sizes))
    return {"kind": "graft", "model": model, "repeats": repeats, **kv, "machine": machine(),
            "rows": rows}


def _graft_row(engine: Engine, settings, size: int, repeats: int, folder: Path, *, peers: bool) -> dict:
    """One size's row of :func:`bench_graft`: its prefill against the restores, with
    llama-cpp-python's state APIs beside them when ``peers``."""
    from .peers import high_level_state

    tokens = corpus_tokens(engine, size)
    engine.prefill(tokens[:32])  # warm-up
    prefills = repeat_times(lambda: engine.prefill(tokens), repeats)
    state = engine.capture(tokens)
    query = engine.tokenize(QUERIES[0], add_bos=False)
    exact = _graft_is_exact(engine, state, query)
    times = _restore_times(engine, state, tokens, repeats, folder)
    row = _graft_columns(size, prefills, times, state, exact)
    if peers:
        peer = high_level_state(engine.model_path, settings, tokens, repeats)
        row.update({f"llama_cpp_python_{k}": v for k, v in peer.items()})
        row["vs_llama_cpp_python_load_state"] = peer["load_state_s"] / row["restore_s"]
        low, high = peer["load_state_range_s"]
        restores = times["restores"]
        row["vs_llama_cpp_python_load_state_range"] = [low / max(restores), high / min(restores)]
        row["vs_llama_cpp_python_disk_cache"] = peer["disk_cache_load_s"] / row["restore_s"]
    return row


def _restore_times(engine: Engine, state, tokens: list[int], repeats: int, folder: Path) -> dict:
    """The seconds of each repetition of a restore from memory (``restores``), a restore plus
    one token (``plus_one``), llama.cpp's own state file load (``floors``) and the store's first
    access (``firsts``); with the digest that access checks and the state file's size."""
    from ..store.block_store import BlockStore

    size = len(tokens)
    store = BlockStore(folder / "store")
    block, _ = store.put(state, name=f"graft-{size}", kind="manual", source=f"{size} tokens")
    native_file = folder / "native.state"
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
    plus_one = repeat_times(restore_plus_one, repeats)
    floors = [engine.load_state_file(native_file, size) for _ in range(repeats)]
    firsts = repeat_times(first_access, repeats)
    store.close()
    return {"restores": restores, "plus_one": plus_one, "floors": floors, "firsts": firsts,
            "digest": "BLAKE3" if block.blake3 else "SHA-256", "native_file_bytes": native_file.stat().st_size}


def _graft_columns(size: int, prefills: list[float], times: dict, state, exact: bool) -> dict:
    """A :func:`bench_graft` row from its timings: medians, ranges and the ratios between them."""
    restores, plus_one, floors, firsts = times["restores"], times["plus_one"], times["floors"], times["firsts"]
    row = {
        "tokens": size,
        "prefill_s": statistics.median(prefills),
        "restore_s": statistics.median(restores),
        "prefill_range_s": [min(prefills), max(prefills)],
        "restore_range_s": [min(restores), max(restores)],
        "prefill_vs_restore": statistics.median(prefills) / statistics.median(restores),
        "exact": exact,
        "restore_first_access_s": statistics.median(firsts),
        "first_access_vs_floor_range": [min(firsts) / max(floors), max(firsts) / min(floors)],
        "first_access_digest": times["digest"],
        "restore_plus_one_s": statistics.median(plus_one),
        "floor_s": statistics.median(floors),
        "speedup_range": [min(prefills) / max(plus_one), max(prefills) / min(plus_one)],
        "restore_vs_floor_range": [min(restores) / max(floors), max(restores) / min(floors)],
        "bytes": state.n_bytes,
        "bytes_per_token": state.n_bytes / size,
        "native_file_bytes": times["native_file_bytes"],
    }
    row["speedup"] = row["prefill_s"] / row["restore_plus_one_s"]
    row["restore_vs_floor"] = row["restore_s"] / row["floor_s"]
    row["first_access_vs_floor"] = row["restore_first_access_s"] / row["floor_s"]
    return row


def _graft_is_exact(engine: Engine, state, query: Sequence[int]) -> bool:
    """Whether ``query``'s logits after restoring ``state`` are SHA-equal to those after its
    prefill (``engine`` holds that prefill: ``state`` was just captured)."""
    engine.append(query)
    fresh = engine.logits().copy()
    same = Comparison()
    same.add(fresh, engine.graft(state, query))
    return same.sha_equal == 1


def _kv_report(kv_type: Optional[str]) -> dict:
    """The KV cache settings a benchmark ran under (``kv_type``, else the environment's or the default)."""
    settings = engine_settings(**kv_type_settings(kv_type))
    return {"type_k": settings.type_k, "type_v": settings.type_v, "flash_attn": settings.flash_attn}


def bench_paging(
    model: str, sizes: Sequence[int] = (256, 1024, 4096), repeats: int = 3, *, kv_type: Optional[str] = None,
    progress: Progress = None,
) -> dict:
    """First access (read + digest check + restore) vs warm restore (LRU hit) vs re-prefill, through the store."""
    from ..store.block_store import BlockStore

    rows, kv = [], _kv_report(kv_type)
    for done, size in enumerate(sizes, 1):
        settings = engine_settings(n_ctx=_context_for(size), **kv_type_settings(kv_type))
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
    return {"kind": "paging", "model": model, "repeats": repeats, **kv, "machine": machine(),
            "rows": rows}


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
