"""Routing: embed a query, find the one closest block, or abstain.

Each block has routing keys (its name, description and example queries) whose vectors are
stored in the catalog, so reopening a store re-embeds nothing. A FAISS index over the key
vectors is a cache, rebuilt whenever the catalog changes: flat inner product by default,
HNSW above ``APPROXIMATE_ABOVE`` keys. A block's score is the mean of two cosine
similarities: to its nearest key and to the centroid of all its keys (this measured best
on the routing evaluation, docs/routing.md). The route grafts the best block when that
score reaches the abstain threshold (calibrated per store, or the documented default) and
abstains otherwise.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import uuid
from collections import Counter
from pathlib import Path
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Literal, Optional, Sequence

import numpy as np

from .catalog import usable_vector
from .embedder import DEFAULT_EMBEDDER, Embedder  # noqa: F401  (re-exported)
from .errors import InputError, RouterError

logger = logging.getLogger("skillgraft.router")

if TYPE_CHECKING:
    from .blocks import Block
    from .protocols import TextEmbedder
    from .store import BlockStore

# Chosen on the routing evaluation's calibration split (docs/routing.md).
DEFAULT_THRESHOLD = 0.3
DEFAULT_IN_SCOPE_TOLERANCE = 0.02
# A block's score mixes its nearest key (weight 1 - w) and its key centroid (weight w).
CENTROID_WEIGHT = 0.5
APPROXIMATE_ABOVE = 50_000
MAX_QUERY_CHARS = 4_000
SEARCH_K = 32
SINGLE_THREAD_QUERIES = 8
CACHE_FILES = ("keys.faiss", "keys.npz", "keys.json")
THRESHOLD_SETTING = "router.threshold"

Decision = Literal["exact", "graft", "abstain"]


@dataclass(frozen=True)
class Recall:
    """What the memory suggests for a query, and why."""

    decision: Decision
    block: Optional["Block"]
    score: float
    threshold: float
    reason: str
    runner_up: Optional[str] = None
    candidates: list = field(default_factory=list, repr=False)
    near_miss: bool = False

    @property
    def block_id(self) -> Optional[str]:
        return self.block.id if self.block else None

    def as_dict(self) -> dict:
        return {
            "decision": self.decision,
            "block_id": self.block_id,
            "block_name": self.block.name if self.block else None,
            "score": round(self.score, 6),
            "threshold": self.threshold,
            "reason": self.reason,
            "near_miss": self.near_miss,
            "runner_up": self.runner_up,
            "candidates": [{"block_id": b, "score": round(float(sc), 6)} for b, sc in self.candidates],
        }


def clean_query(query) -> str:
    """A usable query string, or :class:`InputError`."""
    if isinstance(query, bytes):
        try:
            query = query.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"the query is not valid UTF-8 (byte {exc.start})") from None
    if not isinstance(query, str):
        raise InputError(f"the query must be text, got {type(query).__name__}")
    try:
        query.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"the query is not valid UTF-8 (character {exc.start})") from None
    query = query.strip()
    if not query:
        raise InputError("the query is empty")
    if "\x00" in query:
        raise InputError(f"the query contains a NUL byte (at character {query.index(chr(0))})")
    return query


class KeyIndex:
    """A FAISS index over key vectors with their block ids.

    Saved as a cache file set (``keys.faiss``, ``keys.npz``, ``keys.json``); ``keys.json``
    records the SHA-256 of the other two, and a loaded cache must also hold unit vectors
    and name only blocks the catalog has, or it is rebuilt.
    """

    def __init__(self, vectors: np.ndarray, block_ids: list[str], *, approximate: Optional[bool] = None) -> None:
        import faiss

        self.block_ids = block_ids
        self.size = len(block_ids)
        self.blocks = sorted(set(block_ids))
        self.centroids = np.zeros((len(self.blocks), vectors.shape[1] if vectors.ndim == 2 else 384), np.float32)
        if self.size:
            position = {b: i for i, b in enumerate(self.blocks)}
            rows = np.array([position[b] for b in block_ids])
            np.add.at(self.centroids, rows, vectors)
            self.centroids /= np.maximum(np.linalg.norm(self.centroids, axis=1, keepdims=True), 1e-12)
        dim = vectors.shape[1] if vectors.ndim == 2 and vectors.shape[0] else 384
        self.approximate = self.size > APPROXIMATE_ABOVE if approximate is None else approximate
        if self.approximate:
            index = faiss.IndexHNSWFlat(dim, 32, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = 80
            index.hnsw.efSearch = 64
        else:
            index = faiss.IndexFlatIP(dim)
        if self.size:
            index.add(vectors)
        self.index = index

    def search(self, vectors: np.ndarray, k: int = SEARCH_K) -> tuple[np.ndarray, np.ndarray]:
        """Nearest keys per row. A few queries search on one thread: FAISS's OpenMP workers
        would otherwise spin after the search and slow the next query's embedding (measured:
        a whole route at 10k keys took 20 ms instead of 4)."""
        import faiss

        if len(vectors) > SINGLE_THREAD_QUERIES:
            return self.index.search(vectors, min(k, max(1, self.size)))
        threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)
        try:
            return self.index.search(vectors, min(k, max(1, self.size)))
        finally:
            faiss.omp_set_num_threads(threads)

    def save(self, folder: Path, version: str, embedder: str) -> None:
        """Write the index as a cache file set; a later process loads it if still current and intact."""
        import faiss

        folder.mkdir(parents=True, exist_ok=True)
        tag = f"{os.getpid()}.{uuid.uuid4().hex[:8]}"
        parts = {name: folder / f".{name}.{tag}.part" for name in CACHE_FILES}
        try:
            faiss.write_index(self.index, str(parts["keys.faiss"]))
            with open(parts["keys.npz"], "xb") as handle:
                np.savez(handle, centroids=self.centroids)
            meta = {"version": version, "embedder": embedder, "approximate": self.approximate,
                    "block_ids": self.block_ids, "blocks": self.blocks,
                    "sha256": {name: _file_sha256(parts[name]) for name in ("keys.faiss", "keys.npz")}}
            with open(parts["keys.json"], "x") as handle:
                json.dump({**meta, "meta_sha256": _meta_sha256(meta)}, handle)
            for name in ("keys.faiss", "keys.npz", "keys.json"):  # keys.json last: it vouches for the others
                os.replace(parts[name], folder / name)
        finally:
            for part in parts.values():
                part.unlink(missing_ok=True)

    @classmethod
    def load(
        cls, folder: Path, version: str, embedder: str, known_blocks: Optional[set] = None
    ) -> Optional["KeyIndex"]:
        """The cached index if it matches ``version`` and ``embedder`` and is intact; None
        when missing, stale, damaged or naming a block outside ``known_blocks``."""
        import faiss

        try:
            meta = json.loads((folder / "keys.json").read_text())
            if meta.pop("meta_sha256") != _meta_sha256(meta):
                return None
            if meta["version"] != version or meta["embedder"] != embedder:
                return None
            for name in ("keys.faiss", "keys.npz"):
                if _file_sha256(folder / name) != meta["sha256"][name]:
                    return None
            loaded = cls.__new__(cls)
            loaded.index = faiss.read_index(str(folder / "keys.faiss"))
            with np.load(folder / "keys.npz", allow_pickle=False) as arrays:
                loaded.centroids = np.ascontiguousarray(arrays["centroids"], dtype=np.float32)
            loaded.block_ids, loaded.blocks = list(meta["block_ids"]), list(meta["blocks"])
            loaded.size, loaded.approximate = len(loaded.block_ids), bool(meta["approximate"])
            return loaded if loaded._intact(known_blocks) else None
        except Exception:  # a missing, partial, damaged or foreign cache is rebuilt, never trusted
            return None

    def _intact(self, known_blocks: Optional[set]) -> bool:
        """Shapes agree, every vector and centroid is finite and unit length, ids are known."""
        if not all(isinstance(b, str) for b in self.block_ids) or self.blocks != sorted(set(self.block_ids)):
            return False
        if known_blocks is not None and not set(self.blocks) <= known_blocks:
            return False
        if self.index.ntotal != self.size or self.centroids.shape != (len(self.blocks), self.index.d):
            return False
        vectors = self.index.reconstruct_n(0, self.size) if self.size else np.zeros((0, self.index.d), np.float32)
        for array in (vectors, self.centroids):
            squared_norms = np.einsum("ij,ij->i", array, array)  # NaN or inf anywhere makes its row fail
            if not np.all(np.abs(squared_norms - 1.0) < 2e-3):
                return False
        return True


def _meta_sha256(meta: dict) -> str:
    return hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class Router:
    """Routes queries to blocks of one store."""

    def __init__(self, store: "BlockStore", embedder: Optional["TextEmbedder"] = None) -> None:
        self.store = store
        self.embedder = embedder or Embedder()
        self._index: Optional[KeyIndex] = None
        self._version: Optional[str] = None
        self._blocks: dict[str, "Block"] = {}
        self.cache_dir = store.home / "index"
        self.centroid_weight = CENTROID_WEIGHT

    # -- keys ------------------------------------------------------------------------------

    def add_keys(self, block: "Block", texts: Iterable[str], kind: str = "example") -> int:
        """Embed ``texts`` and store them as routing keys of ``block``."""
        return self.add_key_sets(block, [(kind, texts)])

    def add_key_sets(self, block: "Block", sets: Iterable[tuple[str, Iterable[str]]]) -> int:
        """Embed ``[(kind, texts), ...]`` in one batch and store them in one transaction."""
        pairs = [(kind, t.strip()) for kind, texts in sets for t in texts if isinstance(t, str) and t.strip()]
        if not pairs:
            return 0
        vectors = self.embedder.encode([t for _, t in pairs])
        return self.store.add_routing_keys(
            block.id,
            [{"kind": k, "text": t, "embedder": self.embedder.name, "vector": v.tobytes()} for (k, t), v in zip(pairs, vectors)],
        )

    def index(self) -> KeyIndex:
        """The key index: in memory, else the cache file if current and intact, else rebuilt.

        The catalog is the source of truth, read in one snapshot (its version, its blocks and
        their keys agree). A missing, stale, damaged or foreign cache file is rebuilt. Keys
        written by another embedder, or whose vector is malformed, are embedded again (and
        stored again, unless the store is read-only).
        """
        version = self.store.catalog_version()
        if self._index is not None and version == self._version:
            return self._index
        with self.store.snapshot():
            version = self.store.catalog_version()
            blocks = {b.id: b for b in self.store.blocks(include_quarantined=False)}
            stale = self.store.count_stale_keys(self.embedder.name)
            index = None if stale else KeyIndex.load(self.cache_dir, version, self.embedder.name, set(blocks))
            rows = [] if index is not None else [dict(r) for r in self.store.routing_keys() if r["block_id"] in blocks]
        if index is None:
            version = self._repair_vectors(rows, version)
            vectors = np.frombuffer(b"".join(r["vector"] for r in rows), dtype=np.float32)
            vectors = vectors.reshape(len(rows), -1) if rows else np.zeros((0, 384), np.float32)
            index = KeyIndex(np.ascontiguousarray(vectors), [r["block_id"] for r in rows])
            try:
                if version is not None:
                    index.save(self.cache_dir, version, self.embedder.name)
            except OSError as exc:  # a read-only store still routes
                logger.debug("cannot write the index cache: %s", exc)
        self._index, self._blocks, self._version = index, blocks, version
        return index

    def _repair_vectors(self, rows: list[dict], version: str) -> Optional[str]:
        """Embed again, in place, the keys of another embedder or with a malformed vector.

        Returns the catalog version the rows now match: ``version`` when nothing was
        stored, the version after storing the new vectors, or None when another writer
        changed the catalog meanwhile (the index is then rebuilt on the next call).
        """
        mine = Counter(len(r["vector"]) for r in rows if r["embedder"] == self.embedder.name and isinstance(r["vector"], bytes))
        length = mine.most_common(1)[0][0] if mine else None
        bad = [r for r in rows if r["embedder"] != self.embedder.name or not usable_vector(r["vector"], length)]
        if not bad:
            return version
        for row, vector in zip(bad, self.embedder.encode([r["text"] for r in bad])):
            row["embedder"], row["vector"] = self.embedder.name, vector.tobytes()
        if self.store.read_only:
            return version
        return self.store.set_routing_vectors(bad, version)

    # -- routing ---------------------------------------------------------------------------

    @property
    def threshold(self) -> float:
        stored = self.store.setting(THRESHOLD_SETTING)
        return float(stored) if stored is not None else DEFAULT_THRESHOLD

    def scores(self, queries: Sequence[str]) -> list[list[tuple[str, float]]]:
        """Per query, ``[(block_id, score), ...]`` best first.

        score = (1 - w) * cosine to the block's nearest key + w * cosine to its key centroid,
        with w = ``centroid_weight`` (0.5), over the blocks among the nearest keys and the
        nearest centroids.
        """
        index = self.index()
        if index.size == 0:
            return [[] for _ in queries]
        vectors = self.embedder.encode(list(queries))
        sims, ids = index.search(vectors)
        centroid_sims = vectors @ index.centroids.T
        position = {b: i for i, b in enumerate(index.blocks)}
        results = []
        for row_sims, row_ids, row_centroids in zip(sims, ids, centroid_sims):
            nearest: dict[str, float] = {}
            for sim, key in zip(row_sims, row_ids):
                if key >= 0:
                    block_id = index.block_ids[key]
                    nearest[block_id] = max(nearest.get(block_id, -1.0), float(sim))
            for i in np.argsort(-row_centroids)[:4]:
                nearest.setdefault(index.blocks[i], float(row_centroids[i]))
            w = self.centroid_weight
            scored = {b: (1 - w) * s + w * float(row_centroids[position[b]]) for b, s in nearest.items()}
            results.append(sorted(scored.items(), key=lambda item: -item[1]))
        return results

    def route(self, query, *, accept: Optional[Callable[["Block"], bool]] = None) -> Recall:
        """Graft the best block when its score reaches the threshold; otherwise abstain.

        ``accept`` narrows the candidates (say, to blocks this runtime can graft).
        """
        query = clean_query(query)
        if len(query) > MAX_QUERY_CHARS:
            query = query[:MAX_QUERY_CHARS]
        threshold = self.threshold
        ranked = [
            (block_id, score)
            for block_id, score in self.scores([query])[0]
            if block_id in self._blocks and (accept is None or accept(self._blocks[block_id]))
        ]
        if not ranked:
            return Recall("abstain", None, 0.0, threshold, "the store has no routable blocks (it is empty)")
        block_id, score = ranked[0]
        block = self._blocks[block_id]
        runner_up = self._blocks[ranked[1][0]].name if len(ranked) > 1 else None
        if score >= threshold:
            reason = f"block {block.name!r} scores {score:.3f} >= threshold {threshold:.3f}"
            return Recall("graft", block, score, threshold, reason, runner_up, ranked[:5])
        reason = f"best score {score:.3f} (block {block.name!r}) < threshold {threshold:.3f}: out of domain"
        return Recall("abstain", None, score, threshold, reason, block.name, ranked[:5])

    # -- calibration -----------------------------------------------------------------------

    def calibrate(
        self,
        in_domain: Sequence[tuple[str, str]],
        out_of_domain: Sequence[str],
        *,
        in_scope_tolerance: float = DEFAULT_IN_SCOPE_TOLERANCE,
        max_false_accept: Optional[float] = None,
        save: bool = True,
    ) -> dict:
        """Choose the abstain threshold from labelled queries and store it.

        ``in_domain`` pairs a query with the name (or id) of the block it should reach.
        Among thresholds whose in-scope accuracy (right block, not abstained) is within
        ``in_scope_tolerance`` of the best reachable, the one abstaining on the most
        out-of-domain queries wins; ``max_false_accept`` caps the out-of-domain accept rate.
        """
        if not in_domain:
            raise InputError("calibration needs in-domain examples (query, block name)")
        if not out_of_domain:
            raise InputError(
                "calibration needs out-of-domain examples: without them no threshold can be measured "
                f"(the default {DEFAULT_THRESHOLD} stays in force)"
            )
        names = {b.name: b.id for b in self.store.blocks(include_quarantined=False)}
        ids = set(names.values())
        targets = []
        for query, ref in in_domain:
            target = names.get(ref, ref)
            if target not in ids:
                raise InputError(f"calibration example {query!r} names an unknown block {ref!r}")
            targets.append(target)
        in_scores = self.scores([clean_query(q) for q, _ in in_domain])
        ood_scores = self.scores([clean_query(q) for q in out_of_domain])
        in_best = [(r[0][0], r[0][1]) if r else (None, -1.0) for r in in_scores]
        ood_best = np.array([r[0][1] if r else -1.0 for r in ood_scores])
        candidates = sorted({round(s, 4) for _, s in in_best} | {round(float(s) + 1e-4, 4) for s in ood_best})
        curve = [(t, evaluate_threshold(t, in_best, targets, ood_best)) for t in candidates]
        if max_false_accept is not None:
            curve = [(t, s) for t, s in curve if s["false_accept"] <= max_false_accept]
        if not curve:
            raise RouterError(f"no threshold keeps the false-accept rate under {max_false_accept}")
        floor = max(s["in_scope_accuracy"] for _, s in curve) - in_scope_tolerance
        threshold, stats = max(
            ((t, s) for t, s in curve if s["in_scope_accuracy"] >= floor - 1e-12),
            key=lambda item: (item[1]["ood_recall"], -item[0]),
        )
        if save:
            self.store.set_setting(THRESHOLD_SETTING, repr(float(threshold)))
        return {"threshold": float(threshold), **stats}


def wilson_interval(successes: int, total: int, z: float = 1.96) -> list[float]:
    """Wilson score 95% interval of a proportion."""
    if total == 0:
        return [0.0, 1.0]
    p = successes / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return [round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4)]


def evaluate_threshold(threshold: float, in_best, targets, ood_best: np.ndarray) -> dict:
    """Rates of one threshold: false accepts (OOD routed), false abstains, misroutes."""
    accepted = [score >= threshold for _, score in in_best]
    right = sum(1 for (bid, _), ok, t in zip(in_best, accepted, targets) if ok and bid == t)
    abstained = sum(1 for ok in accepted if not ok)
    misrouted = len(targets) - right - abstained
    false_accepts = int((ood_best >= threshold).sum())
    n_in, n_ood = len(targets), len(ood_best)
    return {
        "in_scope_accuracy": round(right / n_in, 4),
        "false_abstain": round(abstained / n_in, 4),
        "false_abstain_ci95": wilson_interval(abstained, n_in),
        "misroute": round(misrouted / n_in, 4),
        "false_accept": round(false_accepts / n_ood, 4),
        "false_accept_ci95": wilson_interval(false_accepts, n_ood),
        "ood_recall": round(1 - false_accepts / n_ood, 4),
        "in_domain": n_in,
        "out_of_domain": n_ood,
    }
