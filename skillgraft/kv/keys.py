"""States found by key: chained hashes over fixed-size token blocks.

Every KV state is the prefix state of a token sequence under a runtime. Its tokens are cut into
blocks of :data:`BLOCK_TOKENS`; block ``i``'s key hashes block ``i-1``'s key with the block's
token ids, and the chain starts from the runtime's fingerprint id. Two sequences share their
first ``k`` blocks exactly when their ``k``-th keys are equal, so the longest stored prefix of a
prompt is found with a few key lookups (a binary search over the prompt's own keys: a state
that shares ``k`` blocks shares every fewer), never by comparing the prompt with every state.
The same keys address states in memory, on disk and in a shared store (:func:`state_key`).
"""

from __future__ import annotations

import hashlib
import threading
from typing import Iterable, Optional, Sequence

import numpy as np

from .reuse import common_prefix

__all__ = ["BLOCK_TOKENS", "PrefixIndex", "chain_keys", "legacy_state_key", "state_key"]

BLOCK_TOKENS = 16
_KEY_BYTES = 16


def _token_bytes(tokens: Sequence[int]) -> bytes:
    return np.asarray(tokens, dtype="<i4").tobytes()


def chain_keys(runtime_id: str, tokens: Sequence[int]) -> list[bytes]:
    """The key of each whole block of ``tokens`` under the runtime ``runtime_id``: entry ``k-1``
    stands for the first ``k`` blocks."""
    data = _token_bytes(tokens)
    step = BLOCK_TOKENS * 4
    key = hashlib.blake2b(runtime_id.encode(), digest_size=_KEY_BYTES).digest()
    keys = []
    for start in range(0, len(data) - step + 1, step):
        key = hashlib.blake2b(key + data[start:start + step], digest_size=_KEY_BYTES).digest()
        keys.append(key)
    return keys


def state_key(runtime_id: str, tokens: Sequence[int]) -> str:
    """The content address of the state of ``tokens`` under ``runtime_id`` (64 hex digits): the
    last whole block's chain key, then the tokens after it and the length."""
    keys = chain_keys(runtime_id, tokens)
    last = keys[-1] if keys else hashlib.blake2b(runtime_id.encode(), digest_size=_KEY_BYTES).digest()
    tail = _token_bytes(tokens[len(keys) * BLOCK_TOKENS:])
    return hashlib.sha256(last + tail + len(tokens).to_bytes(8, "little")).hexdigest()


def legacy_state_key(runtime_id: str, tokens: Sequence[int]) -> str:
    """The address derived states had before chained keys (one SHA-256 over the runtime and
    every token id): read to migrate such states, never written."""
    digest = hashlib.sha256(runtime_id.encode() + b"\0")
    digest.update(_token_bytes(tokens))
    return digest.hexdigest()


class PrefixIndex:
    """The states of one runtime by the chain keys of their whole blocks. Thread-safe."""

    def __init__(self, runtime_id: str) -> None:
        self.runtime_id = runtime_id
        self._lock = threading.Lock()
        self._by_block: dict[bytes, set[str]] = {}
        self._states: dict[str, tuple[tuple[int, ...], list[bytes]]] = {}

    def __len__(self) -> int:
        return len(self._states)

    def add(self, key: str, tokens: Sequence[int]) -> None:
        """Index the state stored under ``key`` with its ``tokens``."""
        tokens = tuple(int(t) for t in tokens)
        blocks = chain_keys(self.runtime_id, tokens)
        with self._lock:
            self._drop(key)
            self._states[key] = (tokens, blocks)
            for block in blocks:
                self._by_block.setdefault(block, set()).add(key)

    def remove(self, key: str) -> None:
        with self._lock:
            self._drop(key)

    def _drop(self, key: str) -> None:
        entry = self._states.pop(key, None)
        if entry is None:
            return
        for block in entry[1]:
            holders = self._by_block.get(block)
            if holders is not None:
                holders.discard(key)
                if not holders:
                    del self._by_block[block]

    def sync(self, entries: Iterable[tuple[str, Sequence[int]]]) -> None:
        """Make the index hold exactly ``entries`` (``(key, tokens)``): only the keys that came or
        went are hashed or dropped."""
        entries = dict(entries)
        with self._lock:
            gone = [key for key in self._states if key not in entries]
        for key in gone:
            self.remove(key)
        for key, tokens in entries.items():
            if key not in self._states:
                self.add(key, tokens)

    def candidates(self, prompt: Sequence[int], *, at_least: int = 1) -> list[tuple[int, str]]:
        """``(shared tokens, key)`` of the states sharing the most whole blocks with ``prompt``
        (at least ``at_least`` tokens), longest first, then those sharing fewer blocks: what a
        caller tries in order when a state turns out unusable."""
        keys = chain_keys(self.runtime_id, prompt)
        prompt = np.asarray(prompt, dtype=np.int64)
        found: list[tuple[int, str]] = []
        seen: set[str] = set()
        with self._lock:
            level = self._deepest(keys, len(keys))
            while level > 0 and level * BLOCK_TOKENS + BLOCK_TOKENS > at_least:
                start = level * BLOCK_TOKENS
                window = prompt[start:start + BLOCK_TOKENS]
                at_level = []
                for key in self._by_block.get(keys[level - 1], ()):
                    if key in seen:
                        continue
                    seen.add(key)
                    tokens = self._states[key][0]
                    found_shared = start + common_prefix(tokens[start:start + BLOCK_TOKENS], window)
                    if found_shared >= at_least:
                        at_level.append((found_shared, key))
                found.extend(sorted(at_level, reverse=True))
                level = self._deepest(keys, level - 1)
        return found

    def _deepest(self, keys: list[bytes], below: int) -> int:
        """The most whole blocks (at most ``below``) of the prompt that some state shares."""
        lo, hi = 0, below
        while lo < hi:  # a state sharing k blocks shares every fewer: the hits are a prefix of the keys
            mid = (lo + hi + 1) // 2
            if keys[mid - 1] in self._by_block:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def tokens(self, key: str) -> Optional[tuple[int, ...]]:
        entry = self._states.get(key)
        return entry[0] if entry else None

