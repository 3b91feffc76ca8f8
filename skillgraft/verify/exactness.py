"""Byte-exactness experiments: is a graft at its own position the same as computing fresh?

:func:`verify` runs the self-test behind ``skillgraft verify``: seeded prefixes of varied
length from a built-in corpus, each captured, grafted into a cleared context and queried,
compared with a fresh run that decodes in the same chunks (and, separately, with one
concatenated prefill), and a derived prefix state (cut from a context that went on with
another query) restored and queried, compared with one fresh prefill of the whole prompt.
A negative control that must *not* be exact proves the check can
fail: a graft shifted by one position, or for sliding-window models a context without
``swa_full`` and prefixes longer than the window.
"""

from __future__ import annotations

from ..core.progress import Progress

import hashlib
import statistics
import time
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from ..config import EngineSettings, engine_settings
from ..engine.llama import Engine
from ..kv.prefixes import MIN_TAIL
from ..core.sampling import log_softmax
from ..core.states import KVState, sha256_hex


CORPUS = (
    "The mitochondrion converts the energy stored in nutrients into adenosine triphosphate, the "
    "molecule that powers most work inside a cell. Its inner membrane folds into cristae.",
    "A git rebase rewrites a branch so that its commits sit on top of another base. Interactive "
    "rebase lets you squash, reorder, edit or drop commits before they are shared.",
    "To bake sourdough, feed the starter the night before, mix flour and water, rest the dough, "
    "add salt, fold it every half hour, shape it and bake it hot in a covered pot.",
    "The Treaty of Westphalia in 1648 ended the Thirty Years' War and is often cited as the "
    "origin of the modern system of sovereign states in Europe.",
    "In Python, a generator function uses yield to produce values lazily. Calling it returns an "
    "iterator; each next() resumes the function where it last paused.",
    "Photosynthesis in plants captures light in chlorophyll and uses its energy to turn carbon "
    "dioxide and water into glucose, releasing oxygen as a by-product.",
    "A binary search halves the interval on every step, so it finds an item in a sorted array of "
    "n elements with at most about log2(n) comparisons.",
    "The Pacific Ocean is the largest and deepest ocean basin on Earth, covering roughly a third "
    "of the planet's surface and holding the Mariana Trench.",
    "When you replace a bicycle chain, count the links of the old one, shift to the smallest "
    "cog, break the chain with a chain tool and join the new one with a quick link.",
    "Compound interest grows a balance by applying the rate to both the principal and the "
    "interest already earned; doubling time is about 72 divided by the rate in percent.",
    "SQLite stores a whole database in one file. Write-ahead logging lets readers continue while "
    "a single writer appends changes to a separate log that is checkpointed later.",
    "Jazz improvisation often follows the chord changes of a standard: players outline the "
    "harmony with arpeggios, guide tones and chromatic approach notes.",
    "The Krebs cycle oxidises acetyl-CoA to carbon dioxide and produces NADH and FADH2, which feed "
    "the electron transport chain in the mitochondria.",
    "A hash table maps keys to buckets with a hash function; collisions are resolved by chaining "
    "or open addressing, and the table is resized as its load factor grows.",
    "Mount Everest rises 8,849 metres above sea level on the border between Nepal and the Tibet "
    "Autonomous Region; climbers usually reach it from the south-east ridge.",
    "To solve a quadratic equation ax^2 + bx + c = 0, compute the discriminant b^2 - 4ac; the "
    "roots are (-b plus or minus its square root) divided by 2a.",
)

QUERIES = (
    " Question: summarise this in one sentence.",
    " What is the most important point?",
    " Explain it to a ten-year-old.",
    " Which step comes first?",
    " Give one example.",
    " Is there a common mistake here?",
    " Translate the first sentence into French.",
    " What number appears above?",
    " List two related topics.",
    " Answer briefly: why does it matter?",
)


@dataclass
class Comparison:
    """Agreement between reference logits and candidate logits over many samples."""

    sha_equal: int = 0
    argmax_mismatch: int = 0
    kls: list[float] = field(default_factory=list)

    def add(self, reference: np.ndarray, candidate: np.ndarray) -> None:
        same = hashlib.sha256(reference.tobytes()).digest() == hashlib.sha256(candidate.tobytes()).digest()
        self.sha_equal += int(same)
        self.argmax_mismatch += int(np.argmax(reference) != np.argmax(candidate))
        self.kls.append(0.0 if same else kl_divergence(reference, candidate))

    def summary(self) -> dict:
        kls = sorted(self.kls)
        return {
            "samples": len(kls),
            "sha_equal": self.sha_equal,
            "argmax_mismatch": self.argmax_mismatch,
            "kl_median": statistics.median(kls) if kls else None,
            "kl_p99": float(np.percentile(kls, 99)) if kls else None,
        }


def kl_divergence(reference: np.ndarray, candidate: np.ndarray) -> float:
    """KL(reference || candidate) of the softmax distributions, in nats."""
    p_log = log_softmax(reference)
    q_log = log_softmax(candidate)
    return float(max(0.0, (np.exp(p_log) * (p_log - q_log)).sum()))


def sample_prefix(engine: Engine, rng: np.random.Generator, low: int, high: int) -> list[int]:
    """Token ids of a seeded prefix between ``low`` and ``high`` tokens long."""
    target = int(rng.integers(low, high + 1))
    order = rng.permutation(len(CORPUS))
    text = " ".join(CORPUS[i] for i in order)
    while len(engine.tokenize(text)) < target:
        text += " " + " ".join(CORPUS[i] for i in rng.permutation(len(CORPUS)))
    return engine.tokenize(text)[:target]


def sample_query(engine: Engine, rng: np.random.Generator) -> list[int]:
    return engine.tokenize(QUERIES[int(rng.integers(len(QUERIES)))], add_bos=False)


def compare_graft(engine: Engine, prefix: Sequence[int], query: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Fresh logits (prefix, then query, in the same chunks) and grafted logits."""
    state = engine.capture(prefix)
    engine.append(query)
    fresh = engine.logits()
    grafted = engine.graft(state, query)
    return fresh, grafted


def concatenated_logits(engine: Engine, prefix: Sequence[int], query: Sequence[int]) -> np.ndarray:
    engine.prefill(list(prefix) + list(query))
    return engine.logits()


def derived_logits(engine: Engine, prefix: Sequence[int], other: Sequence[int], query: Sequence[int]) -> np.ndarray:
    """``prefix``'s state cut from a context that went on with ``other``, restored, then ``query``."""
    engine.prefill(list(prefix) + list(other))
    payload = engine.save_prefix(len(prefix))
    state = KVState(tuple(prefix), payload, sha256_hex(payload), engine.fingerprint)
    engine.reset()
    engine.restore(state)
    engine.append(query)
    return engine.logits()


def shifted_graft_logits(engine: Engine, prefix: Sequence[int], query: Sequence[int], delta: int) -> np.ndarray:
    """Graft ``prefix``'s state moved by ``delta`` positions, then evaluate ``query``."""
    state = engine.capture(prefix)
    engine.restore(state)
    engine.shift_positions(delta)
    engine.append(query)
    return engine.logits()


def verify(
    model: str,
    samples: int = 50,
    *,
    seed: int = 0,
    settings: Optional[EngineSettings] = None,
    control_samples: int = 8,
    progress: Progress = None,
    engine: Optional[Engine] = None,
) -> dict:
    """Run the byte-exactness self-test; return the report ``skillgraft verify`` prints."""
    started = time.perf_counter()
    own_engine = engine is None
    engine = engine or Engine(model, settings)
    try:
        graft, concat, derived = Comparison(), Comparison(), Comparison()
        sliding = engine.sliding_window > 0
        total = samples + (min(samples, control_samples) if sliding else 0)
        control = Comparison()
        for i in range(samples):
            rng = np.random.default_rng([seed, i])
            prefix, query = sample_prefix(engine, rng, 24, 400), sample_query(engine, rng)
            fresh, grafted = compare_graft(engine, prefix, query)
            graft.add(fresh, grafted)
            concat.add(fresh, concatenated_logits(engine, prefix, query))
            tail = list(query)
            while len(tail) < MIN_TAIL:  # as prefix reuse does: at least MIN_TAIL tokens after a derived state
                tail += sample_query(engine, rng)
            derived.add(concatenated_logits(engine, prefix, tail), derived_logits(engine, prefix, sample_query(engine, rng), tail))
            if not sliding:
                control.add(fresh, shifted_graft_logits(engine, prefix, query, 1))
            if progress:
                progress(i + 1, total)
        if sliding:
            control_kind = (
                f"swa_full off, prefixes wrapping the {engine.sliding_window}+{engine.settings.n_ubatch}-cell window cache"
            )
            control = _windowed_control(engine, min(samples, control_samples), seed, samples, total, progress)
        else:
            control_kind = "graft shifted by one position"
        return {
            "model": engine.model_name,
            **graft.summary(),
            "concat": concat.summary(),
            "derived": derived.summary(),
            "negative_control": {"kind": control_kind, **control.summary()},
            "bytes_per_token": engine.state_bytes_per_token,
            "kv_bytes_per_token": engine.kv_bytes_per_token,
            "fingerprint": {"id": engine.fingerprint.id, **engine.fingerprint.model_dump(mode="json")},
            "seconds": round(time.perf_counter() - started, 2),
        }
    finally:
        if own_engine:
            engine.close()


def _windowed_control(engine: Engine, samples: int, seed: int, done: int, total: int, progress: Progress) -> Comparison:
    """Fresh vs graft in a context whose sliding-window cache is not full-size."""
    # The reduced cache holds window + n_ubatch cells as a ring; the mismatch shows once a
    # prefix wraps it (prefixes just past the window alone were measured exact).
    low = engine.sliding_window + engine.settings.n_ubatch + 16
    settings = engine_settings(**{**engine.settings.model_dump(), "swa_full": False})
    control = Comparison()
    with Engine(engine.model_path, settings, allow_inexact_swa=True) as windowed:
        for i in range(samples):
            rng = np.random.default_rng([seed, 10_000 + i])
            prefix = sample_prefix(windowed, rng, low, low + 184)
            fresh, grafted = compare_graft(windowed, prefix, sample_query(windowed, rng))
            control.add(fresh, grafted)
            if progress:
                progress(done + i + 1, total)
    return control
