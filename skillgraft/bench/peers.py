"""The peers a user would pick instead of skillgraft, for benchmarks only.

llama-cpp-python's own high-level state API: ``Llama.save_state()/load_state()`` and
``LlamaDiskCache``. It is the one module that loads the high-level ``Llama`` (the engine
uses only the low-level API), and nothing but :mod:`skillgraft.bench.runs` uses it.
"""

from __future__ import annotations

import contextlib
import io
import pickle
import tempfile
import time
from pathlib import Path
from typing import Sequence

from ..config import EngineSettings
from ..engine.native import ggml_type


def high_level_state(model_path: Path, settings: EngineSettings, tokens: Sequence[int], repeats: int) -> dict:
    """Time ``Llama.save_state/load_state`` and ``LlamaDiskCache`` on ``tokens``; medians."""
    import statistics

    from llama_cpp import Llama
    from llama_cpp.llama_cache import LlamaDiskCache

    with _without_extra_buffer_types():
        llm = Llama(
            model_path=str(model_path),
            n_ctx=settings.n_ctx,
            n_batch=settings.n_batch,
            n_ubatch=settings.n_ubatch,
            n_threads=settings.n_threads,
            n_threads_batch=settings.n_threads,
            flash_attn=settings.flash_attn,
            type_k=ggml_type(settings.type_k),
            type_v=ggml_type(settings.type_v),
            verbose=False,
        )
    try:
        llm.eval(list(tokens))
        saves, loads, disk_loads = [], [], []
        state = None
        with tempfile.TemporaryDirectory(prefix="skillgraft-peer-") as folder:
            cache = LlamaDiskCache(cache_dir=folder, capacity_bytes=1 << 40)
            for _ in range(repeats):
                started = time.perf_counter()
                state = llm.save_state()
                saves.append(time.perf_counter() - started)
                started = time.perf_counter()
                llm.load_state(state)
                loads.append(time.perf_counter() - started)
                with contextlib.redirect_stderr(io.StringIO()):  # LlamaDiskCache prints as it stores
                    cache[tuple(tokens)] = state
                started = time.perf_counter()
                llm.load_state(cache[tuple(tokens)])
                disk_loads.append(time.perf_counter() - started)
        state_bytes = int(state.llama_state_size)
        scores_bytes = int(state.scores.nbytes) if state.scores is not None else 0
        return {
            "save_state_s": statistics.median(saves),
            "load_state_s": statistics.median(loads),
            "load_state_range_s": [min(loads), max(loads)],
            "disk_cache_load_s": statistics.median(disk_loads),
            "state_bytes": state_bytes,
            "scores_bytes": scores_bytes,
            "pickled_bytes": len(pickle.dumps(state)),
        }
    finally:
        llm.close()


@contextlib.contextmanager
def _without_extra_buffer_types():
    """Load ``Llama`` models without extra buffer types (repacked weights, AMX), as the engine
    loads them: the peer then runs the same kernels, and hosts without AMX tile state do not
    crash. ``Llama`` takes its model parameters from ``llama_model_default_params()`` and has
    no argument for this, so that function is wrapped while a model loads."""
    import llama_cpp.llama as high_level

    default = high_level.llama_cpp.llama_model_default_params

    def without_extra_buffer_types():
        params = default()
        params.use_extra_bufts = False
        return params

    high_level.llama_cpp.llama_model_default_params = without_extra_buffer_types
    try:
        yield
    finally:
        high_level.llama_cpp.llama_model_default_params = default
