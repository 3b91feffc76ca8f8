"""A pool of llama-servers and the slot leases that keep requests apart.

Each server is a :class:`~skillgraft.server.engine.LlamaServerEngine` started on loopback
with ``n_slots`` slots. A request leases one ``(server, slot)`` for its whole life — restore,
prefill after the block, generation — so no request ever continues from another's restored
state. A supervisor thread restarts a server whose process died; requests that were in
flight on it fail with :class:`ServerError` and are retried once on another lease by the
gateway.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Optional, Sequence, Union

from ..config import EngineSettings
from ..errors import ConfigError, EngineError, ServerError
from ..core.fingerprint import RuntimeFingerprint
from ..core.states import KVState
from ..server.slot import ServerSlot

if TYPE_CHECKING:
    from ..server.engine import LlamaServerEngine

logger = logging.getLogger("skillgraft.gateway")

SUPERVISE_EVERY_S = 0.5
DEFAULT_LEASE_TIMEOUT_S = 30.0


class NoSlotError(ServerError):
    """No slot came free within the lease timeout: the pool is saturated."""

    def __init__(self, timeout_s: float, n_leases: int) -> None:
        self.timeout_s, self.n_leases = timeout_s, n_leases
        super().__init__(f"all {n_leases} slots stayed busy for {timeout_s:.0f} s; retry later")


@dataclass(frozen=True)
class Lease:
    """One slot of one server, held by one request."""

    server: int
    slot: int
    engine: "LlamaServerEngine"

    def answer_slot(self) -> ServerSlot:
        """The leased slot, as a context for one answer."""
        return ServerSlot(self.engine, self.slot)

    def capture(self, source) -> KVState:
        """Capture ``source`` (text or token ids) in the leased slot."""
        return self.engine.capture(source, slot=self.slot)


@dataclass(frozen=True)
class PoolStatus:
    """What ``/healthz`` reports about the pool."""

    servers: tuple[dict, ...]
    slots_total: int
    slots_leased: int
    restarts: int


EngineFactory = Callable[[], "LlamaServerEngine"]


class ServerPool:
    """``n_servers`` llama-servers of ``n_slots`` slots each, leased one slot per request."""

    def __init__(
        self,
        n_servers: int = 1,
        n_slots: int = 1,
        *,
        model: Union[str, Path, None] = None,
        settings: Optional[EngineSettings] = None,
        binary: Union[str, Path, None] = None,
        lease_timeout_s: float = DEFAULT_LEASE_TIMEOUT_S,
        on_restart: Optional[Callable[[int], None]] = None,
    ) -> None:
        if n_servers < 1 or n_slots < 1:
            raise ConfigError(f"a pool needs at least one server and one slot, got {n_servers} x {n_slots}")
        self.n_slots = n_slots
        self.lease_timeout_s = lease_timeout_s
        self._on_restart = on_restart
        from ..server.engine import LlamaServerEngine

        self.engines: list[LlamaServerEngine] = []
        try:
            for _ in range(n_servers):
                self.engines.append(LlamaServerEngine(model, settings, n_slots=n_slots, binary=binary))
        except BaseException:
            self.close()
            raise
        fingerprints = {engine.fingerprint.id for engine in self.engines}
        if len(fingerprints) != 1:
            self.close()
            raise EngineError(f"the pool's servers disagree on their runtime fingerprint: {sorted(fingerprints)}")
        self._free: queue.Queue[tuple[int, int]] = queue.Queue()
        for slot in range(n_slots):
            for server in range(n_servers):
                self._free.put((server, slot))
        self._leased = 0
        self._count_lock = threading.Lock()
        self._closed = threading.Event()
        self._supervisor = threading.Thread(target=self._supervise, name="skillgraft-pool-supervisor", daemon=True)
        self._supervisor.start()

    @property
    def fingerprint(self) -> RuntimeFingerprint:
        return self.engines[0].fingerprint

    @property
    def n_leases(self) -> int:
        return len(self.engines) * self.n_slots

    def any_engine(self) -> "LlamaServerEngine":
        """A running server, for calls that need no slot (tokenizer, chat template)."""
        for engine in self.engines:
            if engine.alive:
                return engine
        if not self.engines:
            raise ServerError("the server pool is closed")
        return self.engines[0]  # its next request restarts it

    @contextmanager
    def lease(self, *, avoid: Sequence[int] = (), timeout_s: Optional[float] = None) -> Iterator[Lease]:
        """Hold one free slot for the ``with`` block; prefer servers not in ``avoid``."""
        server, slot = self._take(avoid, self.lease_timeout_s if timeout_s is None else timeout_s)
        with self._count_lock:
            self._leased += 1
        try:
            yield Lease(server, slot, self.engines[server])
        finally:
            with self._count_lock:
                self._leased -= 1
            self._free.put((server, slot))

    def _take(self, avoid: Sequence[int], timeout_s: float) -> tuple[int, int]:
        if self._closed.is_set():
            raise ServerError("the server pool is closed")
        deadline = time.monotonic() + timeout_s
        skipped: list[tuple[int, int]] = []
        try:
            while True:
                remaining = deadline - time.monotonic()
                try:
                    candidate = self._free.get(timeout=max(remaining, 0.0)) if remaining > 0 else self._free.get_nowait()
                except queue.Empty:
                    if skipped:  # only avoided servers are free: better one of them than none
                        return skipped.pop(0)
                    raise NoSlotError(timeout_s, self.n_leases) from None
                if candidate[0] not in avoid or len(avoid) >= len(self.engines):
                    return candidate
                skipped.append(candidate)
                if self._free.empty():
                    return skipped.pop(0)
        finally:
            for item in skipped:
                self._free.put(item)

    def _supervise(self) -> None:
        while not self._closed.wait(SUPERVISE_EVERY_S):
            for index, engine in enumerate(self.engines):
                try:
                    if engine.ensure_running() and self._on_restart is not None:
                        self._on_restart(index)
                except Exception as exc:  # keep supervising the others; the next round retries
                    logger.error("restarting llama-server %d failed: %s", index, exc)

    def status(self) -> PoolStatus:
        servers = tuple(
            {"index": i, "pid": engine.pid, "url": engine.url, "alive": engine.pid is not None and engine.alive,
             "restarts": engine.restarts, "completions": engine.completions}
            for i, engine in enumerate(self.engines)
        )
        return PoolStatus(servers, self.n_leases, self._leased, sum(e.restarts for e in self.engines))

    def close(self) -> None:
        """Stop the supervisor and every server (by its own PID)."""
        closed = getattr(self, "_closed", None)
        if closed is not None:
            closed.set()
            self._supervisor.join(timeout=5)
        for engine in self.engines:
            engine.close()
        self.engines = []

    def __enter__(self) -> "ServerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
