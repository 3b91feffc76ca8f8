"""The router's key index: a FAISS index over key vectors with their block ids, cached on disk.

Flat inner product by default, HNSW above ``APPROXIMATE_ABOVE`` keys; a search of a few
queries runs FAISS on one thread (its spinning threads cost more than they save there).
Beside the searched keys it holds the *part keys* (what tells a skill's parts apart: heading
paths, a resource's path and first sentences), never searched, only compared with a query once
its skill is chosen.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Optional

import numpy as np

from ..errors import RouterError

APPROXIMATE_ABOVE = 50_000
SEARCH_K = 32
SINGLE_THREAD_QUERIES = 8
CACHE_FILES = ("keys.faiss", "keys.npz", "keys.json")


class KeyIndex:
    """A FAISS index over key vectors with their block ids.

    Saved as a cache file set (``keys.faiss``, ``keys.npz``, ``keys.json``); ``keys.json``
    records the SHA-256 of the other two, and a loaded cache must also hold unit vectors
    and name only blocks the catalog has, or it is rebuilt.
    """

    def __init__(self, vectors: np.ndarray, block_ids: list[str], *, approximate: Optional[bool] = None,
                 part_vectors: Optional[np.ndarray] = None, part_block_ids: Optional[list[str]] = None) -> None:
        import faiss

        self.block_ids = block_ids
        self.part_block_ids = list(part_block_ids or [])
        self.part_vectors = (np.ascontiguousarray(part_vectors, dtype=np.float32) if self.part_block_ids
                             else np.zeros((0, vectors.shape[1] if vectors.ndim == 2 else 384), np.float32))
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
                np.savez(handle, centroids=self.centroids, parts=self.part_vectors)
            meta = {"version": version, "embedder": embedder, "approximate": self.approximate,
                    "block_ids": self.block_ids, "blocks": self.blocks,
                    "part_block_ids": self.part_block_ids,
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
            loaded.block_ids, loaded.blocks = list(meta["block_ids"]), list(meta["blocks"])
            loaded.part_block_ids = list(meta["part_block_ids"])
            loaded.size, loaded.approximate = len(loaded.block_ids), bool(meta["approximate"])
            return loaded if loaded._intact(known_blocks) else None
        except Exception:  # a missing, partial, damaged or foreign cache is rebuilt, never trusted
            return None

    def _intact(self, known_blocks: Optional[set]) -> bool:
        """Shapes agree, every vector and centroid is finite and unit length, ids are known."""
        if not all(isinstance(b, str) for b in self.block_ids) or self.blocks != sorted(set(self.block_ids)):
            return False
        if not all(isinstance(b, str) for b in self.part_block_ids):
            return False
        if known_blocks is not None and not set(self.blocks) | set(self.part_block_ids) <= known_blocks:
            return False
        if self.index.ntotal != self.size or self.centroids.shape != (len(self.blocks), self.index.d):
            return False
        if self.part_vectors.shape != (len(self.part_block_ids), self.index.d):
            return False
        vectors = self.index.reconstruct_n(0, self.size) if self.size else np.zeros((0, self.index.d), np.float32)
        for array in (vectors, self.centroids, self.part_vectors):
            squared_norms = np.einsum("ij,ij->i", array, array)  # NaN or inf anywhere makes its row fail
            if not np.all(np.abs(squared_norms - 1.0) < 2e-3):
                return False
        return True


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
