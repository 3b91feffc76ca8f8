"""``memory.states``: the prefix states of a memory's runtime (:mod:`skillgraft.kv.prefixes`) —
derived ones on the home's disk and published (:mod:`skillgraft.store.shared_derived`), and its
stores' captured blocks (:mod:`skillgraft.store.block_states`) — made on first use, and the
derived states still pending on the engine's context kept on demand."""

from __future__ import annotations

from typing import Optional

from ..kv.prefixes import PrefixCache
from ..store.block_states import BlockStates
from ..store.derived_states import DERIVED_FOLDER
from ..store.shared_derived import open_derived_states
from .namespaces import namespace_scope

__all__ = ["PrefixStates"]


class PrefixStates:
    """``memory.states``: its :attr:`cache` (:attr:`opened` once made) and :meth:`flush`."""

    def __init__(self, memory) -> None:
        self.memory = memory
        self._cache: Optional[PrefixCache] = None

    @property
    def cache(self) -> Optional[PrefixCache]:
        """The prefix states of this memory's runtime, in the namespace's reuse scope; None when the
        store is read-only or ``derived_bytes`` is 0. Loads the engine the first time (its fingerprint)."""
        memory = self.memory
        if self._cache is None and memory.derived_bytes and not memory.store.read_only:
            fingerprint = memory.engine.fingerprint
            folder = memory.store.home / DERIVED_FOLDER / fingerprint.id[:16]
            store = open_derived_states(memory.store, fingerprint, folder, max_bytes=memory.derived_bytes)
            self._cache = PrefixCache(store, fingerprint.id, memory.engine.cut_state, scope=namespace_scope(memory.namespace),
                                      blocks=BlockStates(memory._stores(), fingerprint.id))
        return self._cache

    @property
    def opened(self) -> Optional[PrefixCache]:
        """The cache if :attr:`cache` has made it already, else None (the engine is not loaded for it)."""
        return self._cache

    def flush(self) -> int:
        """Keep the derived states pending on the context now (else when it turns, or on close); how many."""
        engine = getattr(self.memory, "_engine", None)
        return engine.settle_derived() if engine is not None else 0
