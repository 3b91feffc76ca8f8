"""The fake embedder: :class:`FakeEmbedder` keeps the contract of
:class:`~skillgraft.protocols.TextEmbedder` with no model, so texts that share words score higher."""

from __future__ import annotations

import hashlib
import re
from typing import Sequence

import numpy as np

from ..errors import InputError

__all__ = ["FakeEmbedder"]

_WORD = re.compile(r"\w+")


class FakeEmbedder:
    """Hashing bag of words: lowercased words and their character trigrams, signed-hashed into
    ``dim`` dimensions and L2-normalized. Texts sharing words score higher; ``encoded`` counts
    the texts embedded so far."""

    name = "fake-hashing-embedder"

    def __init__(self, dim: int = 384) -> None:
        self.dim = dim
        self.encoded = 0

    def _features(self, text: str) -> list[tuple[str, float]]:
        words = _WORD.findall(text.casefold())
        features = [(f"w:{word}", 1.0) for word in words]
        for word in words:
            padded = f" {word} "
            features += [(f"c:{padded[i:i + 3]}", 0.25) for i in range(len(padded) - 2)]
        return features or [(f"t:{text}", 1.0)]

    def record(self) -> dict:
        """What a store records of this encoder (see :mod:`skillgraft.routing.encoders`)."""
        return {"name": self.name, "spec": None, "dimension": self.dim, "digest": f"fake-{self.dim}"}

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """One unit-length float32 row per text."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        vectors = np.zeros((len(texts), self.dim), np.float32)
        for row, text in enumerate(texts):
            if not isinstance(text, str):
                raise InputError(f"the embedder takes text, got {type(text).__name__}")
            for feature, weight in self._features(text):
                digest = hashlib.blake2b(feature.encode("utf-8", "surrogatepass"), digest_size=8).digest()
                value = int.from_bytes(digest, "little")
                vectors[row, value % self.dim] += weight if value >> 63 else -weight
            norm = np.linalg.norm(vectors[row])
            if norm == 0:  # every feature cancelled out: fall back to one fixed dimension
                vectors[row, 0], norm = 1.0, 1.0
            vectors[row] /= norm
        self.encoded += len(texts)
        return vectors
