"""The routing keys of a skill version, embedded at once: :func:`embed_part_keys`.

A version's parts route by texts (:mod:`.plan`), many of them shared: the skill's name and
description are keys of every body part. Each distinct text is embedded once. A text that a block
of the same skill already holds under the same embedder, as a key an import wrote (not a
correction's), keeps its stored vector: a text's vector does not depend on the batch it is
encoded in (:meth:`~skillgraft.routing.embedder.Embedder.encode_bulk`), so a changed skill's
unchanged keys cost no encoding. The rest go to the encoder together, sorted by length (few pad)
in chunks of :data:`CHUNK` texts, so a long skill reports progress as its keys are embedded, and
a failing encoder stores nothing (every key is embedded before any block is written). The rows
are the ones :meth:`~skillgraft.routing.router.Router.key_rows` makes, in the same order.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

from ..routing.embedder import Embedder
from .plan import IMPORT_KEY_KINDS

CHUNK = 128  # texts sent to the encoder at a time: a skill's progress moves each chunk

KeyProgress = Optional[Callable[[int, int], None]]


def part_pairs(keys: Sequence[tuple]) -> list[tuple[str, str]]:
    """A part's ``(kind, text)`` pairs as the router keeps them: stripped, empty ones left out."""
    return [(kind, t.strip()) for kind, texts in keys for t in texts if isinstance(t, str) and t.strip()]


def embed_part_keys(router, skill: str, plan: Sequence, progress: KeyProgress = None) -> list[list[dict]]:
    """The key rows of each part of ``plan`` (``{kind, text, embedder, vector}``), the texts
    that skill ``skill`` holds already taking their stored vectors; ``progress(done, total)``
    counts the texts encoded."""
    pairs = [part_pairs(part.keys) for part in plan]
    embedder = router.embedder
    vectors = _stored_vectors(router.store, skill, embedder.name)
    fresh = sorted({t for rows in pairs for _, t in rows if t not in vectors}, key=len)
    if fresh:
        router.check_encoder()  # the store re-checks the name inside the write
    if progress:
        progress(0, len(fresh))
    for start in range(0, len(fresh), CHUNK):
        chunk = fresh[start:start + CHUNK]
        vectors.update(zip(chunk, (v.tobytes() for v in _encode(embedder, chunk))))
        if progress:
            progress(start + len(chunk), len(fresh))
    return [[{"kind": k, "text": t, "embedder": embedder.name, "vector": vectors[t]} for k, t in rows] for rows in pairs]


def _encode(embedder, texts: list[str]) -> np.ndarray:
    """The local encoder runs a bulk of texts on its worker threads; any other, as it encodes."""
    if isinstance(embedder, Embedder):
        return embedder.encode_bulk(texts)
    return np.ascontiguousarray(embedder.encode(texts), dtype=np.float32)


def _stored_vectors(store, skill: str, embedder: str) -> dict[str, bytes]:
    """The vectors the skill's blocks hold of ``embedder``, those of the recorded dimension only."""
    record = store.encoder_record()
    dimension = record.get("dimension") if record and record.get("name") == embedder else None
    if not isinstance(dimension, int):
        return {}
    held = store.skill_key_vectors(skill, embedder, IMPORT_KEY_KINDS)  # what an import wrote: its texts' encodings
    return {text: v for text, v in held.items() if len(v) == 4 * dimension}
