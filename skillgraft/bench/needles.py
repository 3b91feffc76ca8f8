"""The large-store benchmark behind ``skillgraft bench needles``: facts planted at depths of a
store far larger than the serving window, asked for by question."""

from __future__ import annotations

import resource
import tempfile
import time

import numpy as np

from ..config import engine_settings
from ..core.progress import Progress
from ..verify.exactness import CORPUS
from .runs import machine

__all__ = ["NEEDLES", "bench_needles"]

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
        started = time.perf_counter()
        _add_sections(memory, rng, planted, blocks, block_tokens, progress)
        build_s = time.perf_counter() - started
        total_tokens = sum(b.n_tokens for b in memory.store.blocks())
        disk_bytes = sum(p.stat().st_size for p in (memory.store.blocks_dir).iterdir())
        rows, rss = _ask_needles(memory, planted, blocks, progress)
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


def _add_sections(memory, rng, planted: dict, blocks: int, block_tokens: int, progress: Progress) -> None:
    """Store ``blocks`` manuals of shuffled prose, a needle's fact planted in those at its depth
    (and among that manual's routing examples)."""
    for i in range(blocks):
        body = _section_body(memory.engine, rng, i, block_tokens)
        keys = [f"section {i}"]
        if i in planted:
            fact, _, _ = planted[i]
            cut = body.rfind(". ", 0, int(len(body) * float(rng.uniform(0.2, 0.8)))) + 2
            body = body[:cut] + fact + " " + body[cut:]
            keys.append(fact)
        memory.add_manual(f"section-{i}", body, examples=keys)
        if progress:
            progress(i + 1, blocks + len(NEEDLES))


def _section_body(engine, rng, i: int, block_tokens: int) -> str:
    """Section ``i``'s prose: the corpus shuffled until it fills the block, cut to leave room for a fact."""
    sentences = [CORPUS[j] for j in rng.permutation(len(CORPUS))]
    text = f"Section {i}. " + " ".join(sentences)
    while len(engine.tokenize(text)) < block_tokens - 40:
        text += " " + " ".join(CORPUS[j] for j in rng.permutation(len(CORPUS)))
    budget = block_tokens - 60
    return engine.detokenize(engine.tokenize(text, add_bos=False)[:budget])


def _ask_needles(memory, planted: dict, blocks: int, progress: Progress) -> tuple[list[dict], list[float]]:
    """Each needle's question answered from the store, deepest last: a row each, and the resident
    memory (MB) after each."""
    rows, rss = [], []
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
    return rows, rss
