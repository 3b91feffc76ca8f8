"""Where the inspector reads from: a running gateway, or a local store (``skillgraft ui``).

A source hands the page its store under the lock that store's connection needs (and, for a
namespace's memory, the base it reads after its own), asks the memory for a routing decision
(``recall(query, log=False)``: nothing generated, nothing written) and describes the runtime;
``namespace(name)`` is the source of another namespace's memory (a gateway's; a local store
shows its own only). The page itself never writes.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ContextManager, Iterator, Optional, Protocol

from ..errors import InputError

if TYPE_CHECKING:
    from ..core.recall import Recall
    from ..memory import CacheReport, SkillMemory
    from ..store.block_store import BlockStore


@dataclass(frozen=True)
class Runtime:
    """The model, its fingerprint and the servers behind the memory."""

    kind: str  # "gateway" or "local store"
    model: str
    embedder: str
    router_threshold: float
    gate_threshold: float
    gate: str  # the gate's policy after a graft: advisory or enforce
    fingerprint: Optional[dict] = None
    fingerprint_id: Optional[str] = None
    stored_fingerprints: dict[str, int] = field(default_factory=dict)
    servers: tuple[dict, ...] = ()
    slots_total: int = 0
    slots_leased: int = 0
    restarts: int = 0


class InspectorSource(Protocol):
    """What the inspector needs of the memory it shows."""

    def reading(self) -> ContextManager["BlockStore"]:
        """The store, held for the reads of one page."""

    def reading_all(self) -> ContextManager[list]:
        """The stores the memory reads, its own first, then (for a namespace) the base."""

    def namespace(self, name: str) -> "InspectorSource":
        """The source of namespace ``name``'s memory (:class:`InputError` where there is none to show)."""

    def checking(self) -> ContextManager["BlockStore"]:
        """The store to run a (long) check on."""

    def recall(self, query: str) -> "Recall":
        """The memory's decision for ``query``; logs nothing."""

    def runtime(self) -> Runtime:
        """The model, fingerprint, servers and slots behind the memory."""

    def cache(self) -> "CacheReport":
        """The derived-state cache: its budget, use and pins, by skill."""

    def known_tokens(self, block) -> Optional[int]:
        """The tokens of a text block where a model is loaded already (None: none is), read
        while the stores are held (never loads one, never takes the lock)."""


def stores_of(memory: "SkillMemory") -> list:
    """The stores ``memory`` reads: its own, then the base a namespace reads."""
    return [memory.store] + ([memory.base] if memory.base is not None else [])


def stored_fingerprints(store: "BlockStore") -> dict[str, int]:
    counts: dict[str, int] = {}
    for block in store.blocks():
        counts[block.fingerprint_id] = counts.get(block.fingerprint_id, 0) + 1
    return counts


class LocalSource:
    """A store opened in this process (``skillgraft ui``): no servers, no model loaded to show it."""

    def __init__(self, memory: "SkillMemory") -> None:
        self.memory = memory
        self.lock = threading.Lock()

    @contextmanager
    def reading(self) -> Iterator["BlockStore"]:
        with self.lock:
            yield self.memory.store

    checking = reading

    @contextmanager
    def reading_all(self) -> Iterator[list]:
        with self.lock:
            yield stores_of(self.memory)

    def namespace(self, name: str) -> "LocalSource":
        if name != self.memory.namespace:
            raise InputError(f"this inspector shows namespace {self.memory.namespace!r} only "
                             f"(skillgraft ui --namespace {name} shows that one)")
        return self

    def recall(self, query: str) -> "Recall":
        with self.lock:
            return self.memory.recall(query, log=False)

    def cache(self) -> "CacheReport":
        with self.lock:
            return self.memory.skills.cache()

    def known_tokens(self, block) -> Optional[int]:
        return self.memory.blocks.known_tokens(block)

    def runtime(self) -> Runtime:
        with self.lock:
            thresholds = self.memory.router.threshold, self.memory.confidence_gate.threshold
            stored = stored_fingerprints(self.memory.store)
        return Runtime("local store", str(self.memory.model), self.memory.router.embedder.name, *thresholds,
                       self.memory.gate, stored_fingerprints=stored)
