"""The inspector's view of a running gateway."""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

from ..inspector.sources import Runtime, stored_fingerprints

if TYPE_CHECKING:
    from ..core.recall import Recall
    from ..memory import CacheReport
    from ..store.block_store import BlockStore
    from .service import Gateway


class GatewaySource:
    """A running gateway: its recall memory (under the gateway's memory lock) for pages and
    queries, its deposit memory's connection for the check, so a long check never holds up chats."""

    def __init__(self, gateway: "Gateway") -> None:
        self.gateway = gateway

    @contextmanager
    def reading(self) -> Iterator["BlockStore"]:
        with self.gateway.memory_lock:
            yield self.gateway.memory.store

    @contextmanager
    def checking(self) -> Iterator["BlockStore"]:
        with self.gateway.writer_lock:
            yield self.gateway.writer.store

    def recall(self, query: str) -> "Recall":
        with self.gateway.memory_lock:
            return self.gateway.memory.recall(query, log=False)

    def cache(self) -> "CacheReport":
        with self.gateway.memory_lock:
            return self.gateway.memory.skill_cache()

    def runtime(self) -> Runtime:
        memory, status = self.gateway.memory, self.gateway.pool.status()
        fingerprint = self.gateway.pool.fingerprint
        with self.gateway.memory_lock:
            thresholds = memory.router.threshold, memory.gate_threshold
            stored = stored_fingerprints(memory.store)
        return Runtime(
            "gateway", self.gateway.model_name, memory.router.embedder.name, *thresholds, memory.gate,
            fingerprint=fingerprint.model_dump(mode="json"), fingerprint_id=fingerprint.id, stored_fingerprints=stored,
            servers=status.servers, slots_total=status.slots_total, slots_leased=status.slots_leased,
            restarts=status.restarts,
        )
