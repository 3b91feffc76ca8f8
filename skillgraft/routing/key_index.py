"""The router's key index: its key vectors grouped by block, each block's centroid, and a FAISS
index over one row per block (its centroid) and the keys searched on their own, cached on disk.

A query searches the FAISS rows (flat inner product by default, HNSW above
``APPROXIMATE_ABOVE`` rows; a search of a few queries runs FAISS on one thread: its spinning
threads cost more than they save there); only the candidate blocks' own keys are then compared
with it (:meth:`KeyIndex.nearest_keys`), so an imported skill's name and description keys cost
one row between them, whatever the catalog's size. Beside the searched keys it holds the *part
keys* (what tells a skill's parts apart: heading paths, a resource's path and first sentences),
never searched, only compared with a query once its skill is chosen, and a skill's *lead key* (its
description's first sentence), never searched, a term of its block's dense score
(:meth:`KeyIndex.dense_scores`).
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from ..errors import RouterError

APPROXIMATE_ABOVE = 50_000
SEARCH_K = 32
SINGLE_THREAD_QUERIES = 8
CACHE_FILES = ("keys.faiss", "keys.npz", "keys.json")


class KeyIndex:
    """Key vectors with their block ids, the blocks' centroids and a FAISS index over the
    centroids and the ``alone`` keys (those searched on their own).

    Saved as a cache file set (``keys.faiss``, ``keys.npz``, ``keys.json``); ``keys.json``
    records the SHA-256 of the other two, and a loaded cache must also hold unit vectors
    and name only blocks the catalog has, or it is rebuilt.
    """

    def __init__(self, vectors: np.ndarray, block_ids: list[str], *, approximate: Optional[bool] = None,
                 alone: Optional[Sequence[bool]] = None, part_vectors: Optional[np.ndarray] = None,
                 part_block_ids: Optional[list[str]] = None, lead_vectors: Optional[np.ndarray] = None,
                 lead_block_ids: Optional[list[str]] = None) -> None:
        dim = vectors.shape[1] if vectors.ndim == 2 and vectors.shape[0] else 384
        self.block_ids = list(block_ids)
        self.keys = np.ascontiguousarray(vectors, dtype=np.float32).reshape(len(self.block_ids), dim)
        self.part_block_ids = list(part_block_ids or [])
        self.part_vectors = (np.ascontiguousarray(part_vectors, dtype=np.float32) if self.part_block_ids
                             else np.zeros((0, dim), np.float32))
        self.lead_block_ids = list(lead_block_ids or [])
        self.lead_vectors = (np.ascontiguousarray(lead_vectors, dtype=np.float32) if self.lead_block_ids
                             else np.zeros((0, dim), np.float32))
        self.size = len(self.block_ids)
        self.blocks = sorted(set(self.block_ids))
        self.centroids = np.zeros((len(self.blocks), dim), np.float32)
        if self.size:
            position = {b: i for i, b in enumerate(self.blocks)}
            rows = np.array([position[b] for b in self.block_ids])
            np.add.at(self.centroids, rows, self.keys)
            self.centroids /= np.maximum(np.linalg.norm(self.centroids, axis=1, keepdims=True), 1e-12)
        self.alone = np.zeros(self.size, bool) if alone is None else np.asarray(alone, bool).reshape(self.size)
        self._group()
        self.approximate = self.rows > APPROXIMATE_ABOVE if approximate is None else approximate
        index = faiss_index(dim, self.approximate)
        if self.rows:
            index.add(np.concatenate([self.centroids, self.keys[self.alone]]))
        self.index = index

    def _group(self) -> None:
        """Each block's key rows (``key_order[key_start[p]:key_start[p + 1]]`` for block
        position ``p``), its lead key's row (``lead_row[p]``, -1 when none) and each FAISS row's
        block position."""
        position = {b: i for i, b in enumerate(self.blocks)}
        self.lead_row = np.full(len(self.blocks), -1, dtype=np.int64)
        for row, block_id in enumerate(self.lead_block_ids):
            if block_id in position:
                self.lead_row[position[block_id]] = row
        of_key = np.array([position[b] for b in self.block_ids], dtype=np.int64)
        self.key_order = np.argsort(of_key, kind="stable")
        self.key_start = np.searchsorted(of_key[self.key_order], np.arange(len(self.blocks) + 1))
        self.row_block = np.concatenate([np.arange(len(self.blocks)), of_key[self.alone]]).astype(np.int64)
        self.rows = len(self.row_block)

    def search(self, vectors: np.ndarray, k: int = SEARCH_K) -> tuple[np.ndarray, np.ndarray]:
        """The nearest rows per query (cosines, block positions; -1 where fewer rows exist).
        A few queries search on one thread: FAISS's OpenMP workers would otherwise spin after
        the search and slow the next query's embedding (measured: a whole route at 10k keys
        took 20 ms instead of 4)."""
        import faiss

        k = min(k, max(1, self.rows))
        if len(vectors) > SINGLE_THREAD_QUERIES:
            sims, rows = self.index.search(vectors, k)
        else:
            threads = faiss.omp_get_max_threads()
            faiss.omp_set_num_threads(1)
            try:
                sims, rows = self.index.search(vectors, k)
            finally:
                faiss.omp_set_num_threads(threads)
        return sims, np.where(rows >= 0, self.row_block[np.maximum(rows, 0)], -1)

    def nearest_blocks(self, vectors: np.ndarray, owner_of: Callable[[str], str], least: int) -> np.ndarray:
        """Per query, the block positions of the :data:`SEARCH_K` nearest rows (-1 past the
        last), more rows when they hold fewer than ``least`` owners (``owner_of(block_id)``:
        one skill's many blocks or examples must not crowd the others out)."""
        k = SEARCH_K
        _, found = self.search(vectors, k)
        while k < self.rows and any(len({owner_of(self.blocks[p]) for p in row if p >= 0}) < least for row in found):
            k *= 8
            _, found = self.search(vectors, k)
        return found

    def nearest_keys(self, vector: np.ndarray, positions: Sequence[int]) -> np.ndarray:
        """The cosine of ``vector`` to the nearest key of each block position in ``positions``."""
        positions = np.asarray(positions, dtype=np.int64)
        if not len(positions):
            return np.zeros(0, np.float32)
        starts, ends = self.key_start[positions], self.key_start[positions + 1]
        rows = np.concatenate([self.key_order[a:b] for a, b in zip(starts, ends)])
        sims = self.keys[rows] @ vector
        return np.maximum.reduceat(sims, np.concatenate([[0], np.cumsum(ends - starts)[:-1]]))

    def dense_scores(self, vector: np.ndarray, positions: Sequence[int], centroid_weight: float):
        """``(nearest, dense)`` per block position: the cosine of ``vector`` to the block's nearest
        key, and its dense score: that cosine and its centroid's mixed (``centroid_weight`` the
        centroid's share), averaged with its lead key's cosine at one third when it has one."""
        positions = np.asarray(positions, dtype=np.int64)
        nearest = self.nearest_keys(vector, positions)
        mixed = (1 - centroid_weight) * nearest + centroid_weight * (self.centroids[positions] @ vector)
        rows = self.lead_row[positions]
        if not len(self.lead_vectors) or not (rows >= 0).any():
            return nearest, mixed
        lead = self.lead_vectors[np.maximum(rows, 0)] @ vector
        return nearest, np.where(rows >= 0, (2 * mixed + lead) / 3, mixed)

    def save(self, folder: Path, version: str, embedder: str) -> None:
        """Write the index as a cache file set; a later process loads it if still current and intact."""
        import faiss

        folder.mkdir(parents=True, exist_ok=True)
        tag = f"{os.getpid()}.{uuid.uuid4().hex[:8]}"
        parts = {name: folder / f".{name}.{tag}.part" for name in CACHE_FILES}
        try:
            faiss.write_index(self.index, str(parts["keys.faiss"]))
            with open(parts["keys.npz"], "xb") as handle:
                np.savez(handle, centroids=self.centroids, parts=self.part_vectors, keys=self.keys, alone=self.alone,
                         leads=self.lead_vectors)
            meta = {"version": version, "embedder": embedder, "approximate": self.approximate,
                    "block_ids": self.block_ids, "blocks": self.blocks,
                    "part_block_ids": self.part_block_ids, "lead_block_ids": self.lead_block_ids,
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
                loaded.part_vectors = np.ascontiguousarray(arrays["parts"], dtype=np.float32)
                loaded.keys = np.ascontiguousarray(arrays["keys"], dtype=np.float32)
                loaded.alone = np.asarray(arrays["alone"], dtype=bool)
                loaded.lead_vectors = np.ascontiguousarray(arrays["leads"], dtype=np.float32)
            loaded.block_ids, loaded.blocks = list(meta["block_ids"]), list(meta["blocks"])
            loaded.part_block_ids, loaded.lead_block_ids = list(meta["part_block_ids"]), list(meta["lead_block_ids"])
            loaded.size, loaded.approximate = len(loaded.block_ids), bool(meta["approximate"])
            if loaded.keys.shape[0] != loaded.size or loaded.alone.shape != (loaded.size,):
                return None
            loaded._group()
            return loaded if loaded._intact(known_blocks) else None
        except Exception:  # a missing, partial, damaged or foreign cache is rebuilt, never trusted
            return None

    def _intact(self, known_blocks: Optional[set]) -> bool:
        """Shapes agree, every vector and centroid is finite and unit length, ids are known."""
        if not all(isinstance(b, str) for b in self.block_ids) or self.blocks != sorted(set(self.block_ids)):
            return False
        if not all(isinstance(b, str) for b in self.part_block_ids + self.lead_block_ids):
            return False
        if known_blocks is not None and not set(self.blocks) | set(self.part_block_ids) | set(self.lead_block_ids) <= known_blocks:
            return False
        if self.index.ntotal != self.rows or self.centroids.shape != (len(self.blocks), self.index.d):
            return False
        if self.part_vectors.shape != (len(self.part_block_ids), self.index.d) or self.keys.shape != (self.size, self.index.d):
            return False
        if self.lead_vectors.shape != (len(self.lead_block_ids), self.index.d):
            return False
        rows = self.index.reconstruct_n(0, self.rows) if self.rows else np.zeros((0, self.index.d), np.float32)
        if not np.allclose(rows, np.concatenate([self.centroids, self.keys[self.alone]]), atol=1e-5):
            return False
        for array in (self.keys, self.centroids, self.part_vectors, self.lead_vectors):
            squared_norms = np.einsum("ij,ij->i", array, array)  # NaN or inf anywhere makes its row fail
            if not np.all(np.abs(squared_norms - 1.0) < 2e-3):
                return False
        return True


def faiss_index(dim: int, approximate: bool):
    """An empty inner-product FAISS index: HNSW when ``approximate``, else flat."""
    import faiss

    if not approximate:
        return faiss.IndexFlatIP(dim)
    index = faiss.IndexHNSWFlat(dim, 32, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = 80
    index.hnsw.efSearch = 64
    return index


def key_matrix(rows: list[dict], dimension) -> np.ndarray:
    """The keys' vectors as one matrix; :class:`RouterError` when they are not all of one
    length, the recorded ``dimension`` (a store damaged by mixing encoders), or not finite."""
    lengths = {len(r["vector"]) for r in rows}
    expected = {dimension * 4} if isinstance(dimension, int) and dimension > 0 else lengths
    if len(lengths) > 1 or (lengths and lengths != expected) or any(n % 4 for n in lengths):
        shown = sorted(n // 4 for n in lengths)[:4]
        raise RouterError(f"the store's routing vectors have {shown} dimensions where its encoder records "
                          f"{dimension}: run `skillgraft reembed --force` to embed every key again")
    if not rows:
        return np.zeros((0, dimension if isinstance(dimension, int) and dimension > 0 else 384), np.float32)
    vectors = np.frombuffer(b"".join(r["vector"] for r in rows), dtype=np.float32).reshape(len(rows), -1)
    if not np.isfinite(vectors).all():
        raise RouterError("the store has routing vectors that are not finite: run `skillgraft reembed --force`")
    return vectors


def _meta_sha256(meta: dict) -> str:
    return hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
