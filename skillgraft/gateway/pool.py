"""A pool of llama-servers and the slot leases that keep requests apart.

Each server is a :class:`~skillgraft.server.engine.LlamaServerEngine` started on loopback
with ``n_slots`` slots. A request leases one ``(server, slot)`` for its whole life — restore,
prefill after the block, generation — so no request ever continues from another's restored
state. A supervisor thread restarts a server whose process died; requests that were in
flight on it fail with :class:`ServerError` and are answered again once by the gateway, on
another server or on the restarted one. The supervisor also saves the derived states pending on a slot that has been idle
:data:`~skillgraft.kv.context.IDLE_CAPTURE_S` (:meth:`ServerPool.settle_captures`
saves them all, when the gateway closes).
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
from ..kv.context import IDLE_CAPTURE_S, KEEPER, AnswerContext
from ..kv.prefixes import common_prefix

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
    """One slot of one server, held by one request of reuse scope ``scope``."""

    server: int
    slot: int
    engine: "LlamaServerEngine"
    scope: str = ""

    def answer_slot(self, prefixes=None, deadline=None) -> AnswerContext:
        """The leased slot, as a context for one answer in the lease's scope (with that scope's
        derived states of ``prefixes``; its server's stream read no later than ``deadline``, a
        :class:`~skillgraft.core.deadline.Deadline`). Cells another scope left in the slot are
        not continued."""
        self.engine.claim(self.slot, self.scope)
        return self.engine.context(self.slot).answering(
            None if prefixes is None else prefixes.scoped(self.scope), deadline)

    def forget_cells(self) -> None:
        """What the leased slot holds is unknown from now on: its next prompt is evaluated afresh."""
        self.engine.forget_held(self.slot)

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
        self._released: dict[tuple[int, int], float] = {}  # (server, slot) -> when its last lease ended
        self._count_lock = threading.Lock()
        self._queue_lock = threading.Lock()  # one thread at a time looks through the free slots
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
    def lease(self, *, avoid: Sequence[int] = (), timeout_s: Optional[float] = None,
              prompt: Optional[Sequence[int]] = None, scope: str = "") -> Iterator[Lease]:
        """Hold one free slot for the ``with`` block, for a request of reuse scope ``scope``;
        prefer servers not in ``avoid``, then the slot of that scope that already holds the
        longest beginning of ``prompt`` (its tokens), so the request continues what that slot
        holds instead of prefilling it again (another scope's cells count for nothing)."""
        prefer = None
        if prompt is not None:
            prefer = lambda server, slot: self._held_for(server, slot, prompt, scope)  # noqa: E731
        server, slot = self._take(avoid, self.lease_timeout_s if timeout_s is None else timeout_s, prefer)
        with self._count_lock:
            self._leased += 1
        try:
            yield Lease(server, slot, self.engines[server], scope)
        finally:
            with self._count_lock:
                self._leased -= 1
                self._released[(server, slot)] = time.monotonic()
            self._free.put((server, slot))

    def _held_for(self, server: int, slot: int, prompt: Sequence[int], scope: str) -> int:
        """How much of ``prompt`` the slot holds for ``scope`` (0: it holds another scope's cells)."""
        engine = self.engines[server]
        if engine.held_scope(slot) != scope:
            return 0
        return common_prefix(engine.held_tokens(slot) or (), prompt)

    def _take(self, avoid: Sequence[int], timeout_s: float,
              prefer: Optional[Callable[[int, int], int]] = None) -> tuple[int, int]:
        """The best free slot once one is free: not on an avoided server (unless only those
        are free), then the highest ``prefer(server, slot)``, then the first freed."""
        if self._closed.is_set():
            raise ServerError("the server pool is closed")
        try:
            first = self._free.get(timeout=timeout_s) if timeout_s > 0 else self._free.get_nowait()
        except queue.Empty:
            raise NoSlotError(timeout_s, self.n_leases) from None
        with self._queue_lock:
            free = [first, *self._drain()]
        avoiding = len(avoid) < len(self.engines)

        def rank(index_candidate):
            index, (server, slot) = index_candidate
            usable = not (avoiding and server in avoid)
            return (usable, prefer(server, slot) if prefer is not None else 0, -index)

        index, chosen = max(enumerate(free), key=rank)
        for item in free[:index] + free[index + 1:]:
            self._free.put(item)
        return chosen

    def _drain(self) -> list[tuple[int, int]]:
        """Every slot free now, taken from the queue."""
        free = []
        while True:
            try:
                free.append(self._free.get_nowait())
            except queue.Empty:
                return free

    def _supervise(self) -> None:
        while not self._closed.wait(SUPERVISE_EVERY_S):
            for index, engine in enumerate(self.engines):
                try:
                    if engine.ensure_running() and self._on_restart is not None:
                        self._on_restart(index)
                except Exception as exc:  # keep supervising the others; the next round retries
                    logger.error("restarting llama-server %d failed: %s", index, exc)
            self.settle_captures(idle_s=IDLE_CAPTURE_S, wait_s=0.0)

    def settle_captures(self, *, idle_s: float = 0.0, wait_s: float = 5.0) -> int:
        """Save the derived states pending on every slot idle at least ``idle_s`` (each slot
        taken as a lease is, waiting at most ``wait_s`` for it); how many were kept."""
        kept = 0
        for server, engine in enumerate(list(self.engines)):
            for slot in engine.pending_slots():
                with self._count_lock:
                    idle = time.monotonic() - self._released.get((server, slot), 0.0)
                if idle < idle_s or not self._take_exact(server, slot, wait_s):
                    continue
                try:
                    kept += engine.context(slot).settle()
                except Exception as exc:  # only a cache is lost
                    logger.warning("the derived states pending on slot %d of server %d were not kept: %s", slot, server, exc)
                finally:
                    self._free.put((server, slot))
        if not idle_s:  # asked for all of them: those being kept off the answers' path too
            KEEPER.drain()
        return kept

    def _take_exact(self, server: int, slot: int, wait_s: float) -> bool:
        """Take slot ``slot`` of ``server`` if it is free (or comes free within ``wait_s``)."""
        deadline = time.monotonic() + wait_s
        while True:
            with self._queue_lock:
                free = self._drain()
                found = (server, slot) in free
                for item in free:
                    if item != (server, slot):
                        self._free.put(item)
            if found or time.monotonic() >= deadline or self._closed.is_set():
                return found
            time.sleep(0.05)

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
