"""The inspector's view of a running gateway, and who may see it with which key.

A namespace's key shows that namespace's memory (its own skills, then the base it reads); an
admin key shows the base, and ``?namespace=NAME`` shows one of the namespaces the key file names.
A namespace's view leaves out the pool's servers and slots: they are every namespace's.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator, Optional

from ..errors import InputError
from ..inspector.pages import Viewer
from ..inspector.sources import Runtime, stored_fingerprints, stores_of

if TYPE_CHECKING:
    from ..core.recall import Recall
    from ..memory import CacheReport
    from ..store.block_store import BlockStore
    from .keys import ApiKeys
    from .service import Gateway


class GatewaySource:
    """A running gateway: its recall memory (under the gateway's memory lock) for pages and
    queries, its deposit memory's connection for the check, so a long check never holds up chats."""

    def __init__(self, gateway: "Gateway", namespaces: frozenset = frozenset(), *, pool_shown: bool = True) -> None:
        self.gateway = gateway
        self.namespaces = namespaces  # those an admin may pick: the key file's
        self.pool_shown = pool_shown

    def namespace(self, name: str) -> "GatewaySource":
        """The source of namespace ``name`` (one of :attr:`namespaces`, or this one's own), without the pool."""
        if name not in self.namespaces and name != self.gateway.namespace:
            raise InputError(f"no key of this gateway opens a namespace {name[:64]!r}")
        return GatewaySource(self.gateway.tenant(name), self.namespaces, pool_shown=False)

    @contextmanager
    def reading_all(self) -> Iterator[list]:
        with self.gateway.memory_lock:
            yield stores_of(self.gateway.memory)

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
            return self.gateway.memory.skills.cache()

    def known_tokens(self, block) -> Optional[int]:
        """Counted by the pool's tokenizer (loaded with the gateway): no slot is taken."""
        return self.gateway.memory.blocks.known_tokens(block)

    def runtime(self) -> Runtime:
        memory, status = self.gateway.memory, self.gateway.pool.status()
        fingerprint = self.gateway.pool.fingerprint
        with self.gateway.memory_lock:
            thresholds = memory.router.threshold, memory.confidence_gate.threshold
            stored = stored_fingerprints(memory.store)
        pool = dict(servers=status.servers, slots_total=status.slots_total, slots_leased=status.slots_leased,
                    restarts=status.restarts) if self.pool_shown else {}
        return Runtime(
            "gateway", self.gateway.model_name, memory.router.embedder.name, *thresholds, memory.gate,
            fingerprint=fingerprint.model_dump(mode="json"), fingerprint_id=fingerprint.id, stored_fingerprints=stored,
            **pool,
        )


def viewer_of(keys: "ApiKeys"):
    """Who a key given to the inspector is (:class:`Viewer`), as the rest of the gateway judges it:
    an admin key sees the base, a namespace's key its namespace; None for no key of these."""

    def viewer(key: str):
        principal = keys.principal(f"Bearer {key}".encode())
        if principal is None:
            return None
        return Viewer(None, admin=True) if principal.admin else Viewer(principal.namespace, admin=False)

    return viewer
