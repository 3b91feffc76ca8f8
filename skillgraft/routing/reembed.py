"""``skillgraft reembed``: move a store to another text encoder, crash-safe and shared-store safe.

Every routing key (corrections included) is embedded with the new encoder and staged beside
the old vectors, batch by batch, each batch its own transaction; nothing routes on them yet.
Then one transaction checks that every key has a staged vector for its current text, swaps
all vectors and records the new encoder (:meth:`~skillgraft.store.routing_edits.RoutingEdits.switch_vectors`).
Keys another writer added meanwhile are staged and the switch tried again. A re-embed killed
at any point leaves the store on the old encoder, usable as before; run again with the same
encoder, it reuses what it staged (staged vectors are keyed by the encoder's whole record:
another endpoint or dimension under the same name stages afresh, and a switch refuses vectors
of another dimension than the record's). After the switch a process still on the old encoder is refused (its next
route or key write raises :class:`~skillgraft.errors.EncoderMismatchError`).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Optional

import numpy as np

from ..core.progress import Progress
from ..errors import RouterError, StoreError
from ..store.routing_edits import stage_key
from .encoders import encoder_record

if TYPE_CHECKING:
    from ..protocols import TextEmbedder
    from ..store.block_store import BlockStore

__all__ = ["ReembedReport", "reembed"]

BATCH = 256
MAX_ROUNDS = 20


@dataclass(frozen=True)
class ReembedReport:
    """What :func:`reembed` did: ``keys`` switched to ``embedder`` (``previous`` before)."""

    keys: int
    embedder: str
    previous: Optional[str]
    dimension: int
    embedded: int
    seconds: float
    changed: bool

    def as_dict(self) -> dict:
        return asdict(self)


def reembed(store: "BlockStore", embedder: "TextEmbedder", *, force: bool = False,
            progress: Progress = None, batch: int = BATCH) -> ReembedReport:
    """Re-embed every routing key of ``store`` with ``embedder`` and record it as the store's
    encoder. A store already on ``embedder`` (every key made by it) is left as it is unless
    ``force``."""
    started = time.perf_counter()
    record = encoder_record(embedder)
    try:
        previous = store.encoder_record()
    except StoreError:  # a damaged record: the switch writes a good one
        previous = None
    total = len(store.routing_keys())
    counts = store.key_embedders()
    already = previous is not None and previous["name"] == record["name"] and set(counts) <= {record["name"]} \
        and previous.get("digest") == record.get("digest")
    if already and not force:
        return ReembedReport(total, record["name"], previous["name"], record["dimension"], 0,
                             time.perf_counter() - started, False)
    embedded = 0
    staged = stage_key(record)
    for _ in range(MAX_ROUNDS):
        while True:
            pending = store.unstaged_keys(staged, limit=batch)
            if not pending:
                break
            vectors = np.asarray(embedder.encode([row["text"] for row in pending]), dtype=np.float32)
            if vectors.ndim != 2 or vectors.shape != (len(pending), record["dimension"]) or not np.isfinite(vectors).all():
                raise RouterError(f"{record['name']} gave {vectors.shape} vectors for {len(pending)} texts of "
                                  f"{record['dimension']} dimensions (or values that are not finite); nothing was switched")
            store.stage_vectors(staged, [
                {"id": row["id"], "text": row["text"], "vector": vector.tobytes()} for row, vector in zip(pending, vectors)
            ])
            embedded += len(pending)
            if progress:
                progress(min(embedded, total), max(total, embedded))
        switched = store.switch_vectors(record)
        if switched is not None:
            name = previous["name"] if previous else (max(counts, key=counts.get) if counts else None)
            return ReembedReport(switched, record["name"], name, record["dimension"], embedded,
                                 time.perf_counter() - started, True)
    raise RouterError(f"other writers kept adding routing keys: the re-embed did not settle in {MAX_ROUNDS} rounds; "
                      "the store stays on its old encoder, run it again")
