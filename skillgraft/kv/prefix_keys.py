"""The keys that find prefix states: chained block keys, started from the runtime and the
reuse scope (see :mod:`skillgraft.kv.prefixes`), and the index of states by them."""

from __future__ import annotations

import hashlib
import threading
from typing import Iterable, Optional, Sequence

import numpy as np

__all__ = ["BLOCK_SCOPE", "BLOCK_TOKENS", "SCOPE_HEX", "PrefixIndex", "chain_keys", "common_prefix", "reuse_scope", "state_key"]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    left, right = np.asarray(a[:n], dtype=np.int64), np.asarray(b[:n], dtype=np.int64)
    differ = np.flatnonzero(left != right)
    return int(differ[0]) if differ.size else n


BLOCK_TOKENS = 16
_KEY_BYTES = 16
SCOPE_HEX = 32
# The scope of captured blocks: every scope of a memory finds them, and no reuse scope (``""``
# or 32 hex digits) is this, so a block's chain is never a prompt's or a derived state's.
BLOCK_SCOPE = "blocks"


def reuse_scope(namespace: str = "", salt: str = "") -> str:
    """The scope within which prompts share their reuse: ``""`` for the default namespace
    without a salt, else 32 hex digits naming ``namespace`` and ``salt`` (neither readable
    from it)."""
    if not namespace and not salt:
        return ""
    digest = hashlib.blake2b(digest_size=SCOPE_HEX // 2, person=b"sg-reuse-scope")
    digest.update(namespace.encode() + b"\0" + salt.encode())
    return digest.hexdigest()


def _token_bytes(tokens: Sequence[int]) -> bytes:
    return np.asarray(tokens, dtype="<i4").tobytes()


def _chain_start(runtime_id: str, scope: str) -> bytes:
    seed = runtime_id if not scope else f"{runtime_id}\0scope:{scope}"
    return hashlib.blake2b(seed.encode(), digest_size=_KEY_BYTES).digest()


def chain_keys(runtime_id: str, tokens: Sequence[int], scope: str = "") -> list[bytes]:
    """The key of each whole block of ``tokens`` under the runtime ``runtime_id`` in ``scope``:
    entry ``k-1`` stands for the first ``k`` blocks."""
    data = _token_bytes(tokens)
    step = BLOCK_TOKENS * 4
    key = _chain_start(runtime_id, scope)
    keys = []
    for start in range(0, len(data) - step + 1, step):
        key = hashlib.blake2b(key + data[start:start + step], digest_size=_KEY_BYTES).digest()
        keys.append(key)
    return keys


def state_key(runtime_id: str, tokens: Sequence[int], scope: str = "") -> str:
    """The content address of the state of ``tokens`` under ``runtime_id`` in ``scope`` (64 hex
    digits): the last whole block's chain key, then the tokens after it and the length."""
    keys = chain_keys(runtime_id, tokens, scope)
    last = keys[-1] if keys else _chain_start(runtime_id, scope)
    tail = _token_bytes(tokens[len(keys) * BLOCK_TOKENS:])
    return hashlib.sha256(last + tail + len(tokens).to_bytes(8, "little")).hexdigest()


class PrefixIndex:
    """The states of one runtime by the chain keys of their whole blocks, each chain started
    from the state's scope: a prompt finds only its own scope's states. Thread-safe."""

    def __init__(self, runtime_id: str) -> None:
        self.runtime_id = runtime_id
        self._lock = threading.Lock()
        self._by_block: dict[bytes, set[str]] = {}
        self._states: dict[str, tuple[tuple[int, ...], list[bytes]]] = {}

    def __len__(self) -> int:
        return len(self._states)

    def add(self, key: str, tokens: Sequence[int], scope: str = "") -> None:
        """Index the state stored under ``key`` with its ``tokens``, in ``scope``."""
        tokens = tuple(int(t) for t in tokens)
        blocks = chain_keys(self.runtime_id, tokens, scope)
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

    def sync(self, entries: Iterable[tuple[str, Sequence[int], str]]) -> None:
        """Make the index hold exactly ``entries`` (``(key, tokens, scope)``): only the keys
        that came or went are hashed or dropped."""
        entries = {key: (tokens, scope) for key, tokens, scope in entries}
        with self._lock:
            gone = [key for key in self._states if key not in entries]
        for key in gone:
            self.remove(key)
        for key, (tokens, scope) in entries.items():
            if key not in self._states:
                self.add(key, tokens, scope)

    def candidates(self, prompt: Sequence[int], *, at_least: int = 1, scope: str = "",
                   keys: Optional[list[bytes]] = None) -> list[tuple[int, str]]:
        """``(shared tokens, key)`` of the states of ``scope`` sharing the most whole blocks
        with ``prompt`` (at least ``at_least`` tokens), longest first, then those sharing fewer
        blocks: what a caller tries in order when a state turns out unusable. ``keys``: the
        prompt's chain keys in ``scope``, when the caller has them."""
        if keys is None:
            keys = chain_keys(self.runtime_id, prompt, scope)
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
