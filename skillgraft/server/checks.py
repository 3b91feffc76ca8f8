"""Exactness and speed of grafts through llama-server (``verify --engine server``, ``bench server``).

:func:`verify_server` compares, per seeded sample, a graft through the server with the
server's own fresh prefill of the same tokens in the same chunks (prefix prefilled in the
slot, then the query on top of it): the top-k log-probabilities the server returns for each
of a greedy continuation's tokens must be identical. It also checks the byte round trip
(restore, save, compare), ``cache_n``, the one-request cold prefill (other chunks, reported
only), and agreement with the in-process engine. A negative control — another text's
state under this text's tokens, which no size, hash or fingerprint check can see — must
differ, proving the comparison can fail.

:func:`bench_server` times a graft (restore + first token over HTTP) against the server's
cold prefill, its own host-memory prompt cache (``--cache-ram``) and plain ``cache_prompt``
reuse while the prefix is still resident.
"""

from __future__ import annotations

from ..core.progress import Progress

import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

from ..config import EngineSettings, engine_settings
from ..verify.exactness import sample_prefix, sample_query
from ..core.sampling import SamplingOptions, log_softmax
from .engine import Completion, LlamaServerEngine
from ..core.states import KVState, sha256_hex



def _steps_key(completion: Completion) -> tuple:
    return tuple((s.token, s.logprob, tuple((t.token, t.logprob) for t in s.top)) for s in completion.steps)


@dataclass
class ServerVerifyReport:
    """What ``skillgraft verify --engine server --json`` prints."""

    model: str
    samples: int = 0
    sha_equal: int = 0
    argmax_mismatch: int = 0
    continuation_tokens: int = 16
    top_k: int = 10
    round_trip_equal: bool = True
    cache_n_ok: bool = True
    concat_equal: int = 0
    in_process: Optional[dict] = None
    negative_control: dict = field(default_factory=dict)
    server: dict = field(default_factory=dict)
    fingerprint: dict = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def _in_process_top(engine, k: int) -> tuple[list[int], np.ndarray]:
    logprobs = log_softmax(engine.logits())
    order = np.argsort(-logprobs, kind="stable")[:k]
    return [int(t) for t in order], logprobs[order]


def verify_server(
    server: LlamaServerEngine,
    samples: int = 20,
    *,
    seed: int = 0,
    top_k: int = 10,
    continuation: int = 16,
    in_process=None,
    progress: Progress = None,
) -> ServerVerifyReport:
    """Run the exactness check through ``server``; ``in_process`` (an Engine with the same
    fingerprint) adds the cross-engine comparison."""
    started = time.perf_counter()
    report = ServerVerifyReport(model=server.model_name, continuation_tokens=continuation, top_k=top_k)
    control_equal = control_n = 0
    greedy = SamplingOptions(continuation)
    cross = {"samples": 0, "capture_bytes_equal": 0, "greedy_tokens_equal": 0, "top_k_ids_equal": 0,
             "max_abs_logprob_diff": 0.0} if in_process is not None else None
    for i in range(samples):
        rng = np.random.default_rng([seed, i])
        prefix, query = sample_prefix(server, rng, 24, 400), sample_query(server, rng)
        state = server.capture(prefix)
        fresh, graft = _check_graft(server, report, state, prefix, query, greedy, top_k)
        control_rng = np.random.default_rng([seed, i, 1])
        same = _negative_control(server, state, prefix, query, fresh, greedy, top_k, control_rng)
        if same is not None:
            control_n += 1
            control_equal += int(same)
        if cross is not None:
            _compare_in_process(in_process, cross, state, prefix, query, graft, greedy, top_k)
        if progress:
            progress(i + 1, samples)
    report.in_process = cross
    report.negative_control = {
        "kind": "another text's state under this text's tokens",
        "samples": control_n,
        "sha_equal": control_equal,
    }
    report.server = {"build": server.server.build, "url": server.server.url, "argv": list(server.server.argv),
                     "n_slots": server.n_slots}
    report.fingerprint = {"id": server.fingerprint.id, **server.fingerprint.model_dump(mode="json")}
    report.seconds = round(time.perf_counter() - started, 2)
    return report


def _check_graft(server: LlamaServerEngine, report: ServerVerifyReport, state: KVState, prefix, query,
                 greedy: SamplingOptions, top_k: int):
    """One sample's checks into ``report``: the graft against a fresh prefill, the slot round
    trip and a cache-less prefill of the concatenation; the fresh and grafted completions."""
    # Fresh: the prefix prefilled in the slot, then the query evaluated on top of it.
    fresh = server.continue_restored(state, query, "fresh", options=greedy, n_probs=top_k)
    graft = server.graft(state, query, "sample", options=greedy, n_probs=top_k).completion
    report.samples += 1
    report.sha_equal += int(sha256_hex(repr(_steps_key(fresh)).encode()) == sha256_hex(repr(_steps_key(graft)).encode()))
    report.argmax_mismatch += int(fresh.tokens[:1] != graft.tokens[:1])
    report.cache_n_ok &= graft.cache_n == state.n_tokens and graft.prompt_n == len(query)
    server.restore(state, "round-trip")
    report.round_trip_equal &= server.save_slot(0) == (state.tokens, state.payload)
    server.erase_slot(0)
    concat = server.complete(list(prefix) + list(query), greedy, n_probs=top_k, cache_prompt=False)
    report.concat_equal += int(_steps_key(concat) == _steps_key(fresh))
    return fresh, graft


def _negative_control(server: LlamaServerEngine, state: KVState, prefix, query, fresh, greedy: SamplingOptions,
                      top_k: int, rng) -> Optional[bool]:
    """Whether the state of another text of the same length, under this text's tokens, answers
    exactly as the fresh prefill did (None when ``rng`` drew the same text)."""
    other = sample_prefix(server, rng, len(prefix), len(prefix))
    if other == list(prefix):
        return None
    foreign = server.capture(other)
    swapped = KVState(state.tokens, foreign.payload, foreign.sha256, foreign.fingerprint)
    wrong = server.graft(swapped, query, "control", options=greedy, n_probs=top_k).completion
    return _steps_key(wrong) == _steps_key(fresh)


def _compare_in_process(in_process, cross: dict, state: KVState, prefix, query, graft,
                        greedy: SamplingOptions, top_k: int) -> None:
    """Add one sample's cross-engine comparison to ``cross``: the in-process engine's capture
    bytes, greedy tokens and top-k log-probabilities against the server's."""
    local = in_process.capture(list(prefix))
    in_process.graft(local, query)
    ids, values = _in_process_top(in_process, top_k)
    in_process_tokens = [step.token for step in in_process.generate(greedy)]
    server_top = graft.steps[0].top
    cross["samples"] += 1
    cross["capture_bytes_equal"] += int(local.payload == state.payload)
    cross["greedy_tokens_equal"] += int(in_process_tokens == list(graft.tokens))
    cross["top_k_ids_equal"] += int(ids == [t.token for t in server_top])
    if len(server_top) == len(values):
        diff = float(np.max(np.abs(values - np.array([t.logprob for t in server_top]))))
        cross["max_abs_logprob_diff"] = max(cross["max_abs_logprob_diff"], diff)


# -- benchmark ----------------------------------------------------------------------------


def _context_for(n_tokens: int) -> int:
    return ((n_tokens + 64) // 256 + 1) * 256


def _corpus_tokens(server: LlamaServerEngine, n_tokens: int) -> list[int]:
    from ..verify.exactness import CORPUS

    text = " ".join(CORPUS)
    tokens = server.tokenize(text)
    while len(tokens) < n_tokens:
        text += " " + " ".join(reversed(CORPUS)) + f" Part {len(tokens)}."
        tokens = server.tokenize(text)
    return tokens[:n_tokens]


@dataclass(frozen=True)
class ServerBenchRow:
    tokens: int
    graft_s: float
    reprefill_s: float
    speedup: float
    speedup_range: tuple[float, float]
    prompt_cache_s: Optional[float]
    prompt_cache_cache_n: Optional[int]
    vs_prompt_cache: Optional[float]
    resident_s: float
    vs_resident: float
    restore_ms: float
    bytes: int


def _timed(action: Callable[[], Completion], repeats: int) -> tuple[list[float], list[Completion]]:
    times, results = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        results.append(action())
        times.append(time.perf_counter() - started)
    return times, results


def bench_server(
    model: str,
    sizes: Sequence[int] = (1024, 4096),
    repeats: int = 3,
    *,
    settings: Optional[EngineSettings] = None,
    prompt_cache_peer: bool = True,
    progress: Progress = None,
) -> dict:
    """Per size: graft (restore + first token over HTTP) vs cold prefill vs the server's own caches."""
    rows = []
    for done, size in enumerate(sizes, 1):
        pinned = settings or engine_settings(n_ctx=_context_for(size))
        with LlamaServerEngine(model, pinned) as server:
            tokens = _corpus_tokens(server, size)
            query = tokens[-1:]
            block = tokens[:-1]
            state = server.capture(block)
            server.graft(state, query)  # warm-up: writes the slot file once

            def graft() -> Completion:
                return server.graft(state, query, "bench", verify_hash=False).completion

            def reprefill() -> Completion:
                server.erase_slot(0)
                return server.complete(block + query, cache_prompt=False)

            def resident() -> Completion:
                return server.complete(block + query)  # the slot still holds the block

            graft_times, _ = _timed(graft, repeats)
            restores = [server.restore(state, "bench", verify_hash=False).restore_ms for _ in range(repeats)]
            cold_times, _ = _timed(reprefill, repeats)
            server.complete(block + query)
            resident_times, resident_runs = _timed(resident, repeats)
            build = server.server.build
        cache_s = cache_n = None
        if prompt_cache_peer:
            cache_s, cache_n = _prompt_cache_peer(model, pinned, block, query, repeats)
        graft_s, cold_s = statistics.median(graft_times), statistics.median(cold_times)
        rows.append(ServerBenchRow(
            tokens=size,
            graft_s=graft_s,
            reprefill_s=cold_s,
            speedup=cold_s / graft_s,
            speedup_range=(min(cold_times) / max(graft_times), max(cold_times) / min(graft_times)),
            prompt_cache_s=cache_s,
            prompt_cache_cache_n=cache_n,
            vs_prompt_cache=(cache_s / graft_s) if cache_s else None,
            resident_s=statistics.median(resident_times),
            vs_resident=statistics.median(resident_times) / graft_s,
            restore_ms=statistics.median(restores),
            bytes=state.n_bytes,
        ))
        if progress:
            progress(done, len(sizes))
    return {"kind": "server", "model": model, "repeats": repeats, "server_build": build,
            "rows": [asdict(row) for row in rows]}


def _prompt_cache_peer(model: str, settings: EngineSettings, block: list[int], query: list[int],
                       repeats: int) -> tuple[float, int]:
    """llama-server's own host-memory prompt cache: the block's prompt is evicted from the
    slot by an unrelated request, then asked for again."""
    times, cache_ns = [], []
    with LlamaServerEngine(model, settings, prompt_cache_mib=8192) as server:
        other = server.tokenize("An unrelated request that pushes the block out of the slot.")
        server.complete(block)
        for _ in range(repeats):
            server.complete(other)
            started = time.perf_counter()
            result = server.complete(block + query)
            times.append(time.perf_counter() - started)
            cache_ns.append(result.cache_n)
    return statistics.median(times), min(cache_ns)
