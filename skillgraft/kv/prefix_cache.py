"""Derived prefix states: the state after a prefix two prompts shared, found by key.

A :class:`PrefixCache` looks a prompt's longest stored prefix up by the chained keys of its
token blocks (:mod:`.keys`), decides where a new derived state is captured (where two recent
prompts part ways, :meth:`PrefixCache.capture_point`) and keeps captured states in a
:class:`DerivedStore` (the home's bounded folder, or that and a shared store) under their
content address (:func:`~.keys.state_key`).
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Callable, Hashable, Optional, Protocol, Sequence

import numpy as np

from ..core.states import KVState
from ..errors import ConfigError
from .keys import BLOCK_TOKENS, PrefixIndex, state_key
from .reuse import MIN_DERIVED_TOKENS, MIN_TAIL, RECENT_PROMPTS, common_prefix, shared_after_heads

__all__ = ["DerivedStore", "PrefixCache"]


class DerivedStore(Protocol):
    """Where derived states are kept (:class:`~skillgraft.store.derived_states.DerivedStates`)."""

    def entries(self) -> list[tuple[str, tuple[int, ...]]]:
        """The key and the tokens of every state held."""
        ...

    def get(self, key: str) -> Optional[KVState]:
        """The state under ``key``, digest-checked, or None (missing, damaged or foreign: ignored)."""
        ...

    def put(self, key: str, state: KVState, parent: Optional[str] = None) -> None: ...

    @property
    def generation(self) -> Hashable:
        """Changes whenever the states held change (their keys, not their use order)."""
        ...


class PrefixCache:
    """Derived prefix states for one runtime: looked up for each prompt, captured where two
    recent prompts part ways (at least ``min_tokens`` shared), kept in ``store``. A state
    longer than what a prompt shares with it is cut to the shared cells (``cut(state, n)``,
    the engine's: a cell depends only on the tokens before it), so a prefix captured where two
    questions shared a first word still serves a third question."""

    def __init__(self, store: DerivedStore, fingerprint_id: str, cut: Callable[[KVState, int], KVState], *,
                 min_tokens: int = MIN_DERIVED_TOKENS, recent: int = RECENT_PROMPTS) -> None:
        self.store = store
        self.fingerprint_id = fingerprint_id
        self.cut = cut
        self.min_tokens = min_tokens
        if min_tokens < BLOCK_TOKENS:
            raise ConfigError(f"a derived state spans at least one key block ({BLOCK_TOKENS} tokens), not {min_tokens}")
        self._recent: deque[tuple[np.ndarray, int]] = deque(maxlen=recent)
        self._lock = threading.Lock()  # slots of one gateway answer at once
        self._index = PrefixIndex(fingerprint_id)
        self._generation: Hashable = object()  # nothing indexed yet

    def lookup(self, prompt: Sequence[int]) -> Optional[KVState]:
        """The derived state sharing the longest beginning with ``prompt`` (at least
        ``min_tokens``, leaving :data:`MIN_TAIL` to evaluate), cut to what they share: found by
        the chained keys of the prompt's blocks, the index kept in step with the store."""
        limit = len(prompt) - MIN_TAIL
        if limit < self.min_tokens:
            return None
        self._sync()
        for shared, key in self._index.candidates(prompt, at_least=self.min_tokens):
            shared = min(shared, limit)
            if shared < self.min_tokens:
                continue
            state = self.store.get(key)
            if state is None or tuple(state.tokens[:shared]) != tuple(prompt[:shared]):
                continue
            return state if shared == state.n_tokens else self.cut(state, shared)
        return None

    def _sync(self) -> None:
        """Index the store's states again when they changed since the last look."""
        generation = getattr(self.store, "generation", None)  # None: a store that cannot tell
        with self._lock:
            if generation is not None and generation == self._generation:
                return
            self._generation = generation
        self._index.sync(self.store.entries())

    def capture_point(self, prompt: Sequence[int], after: int = 0) -> int:
        """Where a derived state of ``prompt`` should be captured (0: nowhere): the longest
        prefix it shares with a recent prompt that went on differently. ``after`` is how many
        leading cells are a block's: a prompt behind another block (or none) is compared from
        where its own block ends, and the state is captured at this block plus what they share."""
        best = 0
        with self._lock:
            recent = list(self._recent)
        prompt = np.asarray(prompt, dtype=np.int64)  # compared with every recent prompt: converted once
        for earlier, earlier_after in recent:
            same_head = earlier_after == after and common_prefix(earlier[:after], prompt[:after]) == after
            if not same_head:  # another block in front: compare what follows the blocks
                shared, start = shared_after_heads(earlier, earlier_after, prompt, after)
            else:
                shared, start = common_prefix(earlier, prompt), after
                if shared >= min(len(earlier), len(prompt)):  # one extends the other: nothing parts ways
                    continue
            if shared - start >= self.min_tokens and shared > best:
                best = shared
        return best

    def remember(self, prompt: Sequence[int], after: int = 0) -> None:
        """Note ``prompt`` (its first ``after`` cells a block's) for later capture points (the
        same prompt again is noted once)."""
        tokens = np.asarray(prompt, dtype=np.int64)
        with self._lock:
            for index, (earlier, earlier_after) in enumerate(self._recent):
                if earlier_after == after and len(earlier) == len(tokens) and np.array_equal(earlier, tokens):
                    del self._recent[index]
                    break
            self._recent.append((tokens, after))

    def keep(self, state: KVState, parent: Optional[str] = None) -> None:
        """Store a captured derived state under its content address."""
        self.store.put(state_key(self.fingerprint_id, state.tokens), state, parent)
