"""The fake server pool: the gateway's decisions in the fast suite, over one fake engine."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator, Optional, Sequence

from ..core.fingerprint import RuntimeFingerprint
from ..core.states import KVState
from ..kv.context import AnswerContext
from .engine import FakeEngine

__all__ = ["FakeLease", "FakePool"]


class FakeLease:
    """A lease of a :class:`FakePool`: one fake engine's context, for reuse scope ``scope``."""

    def __init__(self, server: int, slot: int, engine: FakeEngine, scope: str = "") -> None:
        self.server, self.slot, self.engine, self.scope = server, slot, engine, scope

    def answer_slot(self, prefixes=None, deadline=None) -> AnswerContext:
        """The fake engine's context (it answers at once: ``deadline`` is the gateway's to check);
        the cells another scope left are dropped first, as a server slot's are."""
        if getattr(self.engine, "held_scope", "") != self.scope:
            self.engine.reset()
            self.engine.held_scope = self.scope
        return self.engine.context.answering(None if prefixes is None else prefixes.scoped(self.scope))

    def forget_cells(self) -> None:
        """The fake engine's cells are dropped (a server slot's are forgotten)."""
        self.engine.reset()

    def capture(self, source) -> KVState:
        return self.engine.capture(source)


class FakePool:
    """A stand-in for the gateway's :class:`~skillgraft.gateway.pool.ServerPool`: one
    :class:`FakeEngine` leased to one request at a time, so the gateway's decisions run in
    the fast suite (an HTTP client over the app, no llama-server). ``prompts`` holds the
    prompt (tokens) each lease was asked for."""

    n_slots = 1
    lease_timeout_s = 5.0

    def __init__(self, engine: Optional[FakeEngine] = None) -> None:
        self.engines = [engine or FakeEngine()]
        self._lock = threading.Lock()
        self.leases = 0
        self.prompts: list[Optional[tuple[int, ...]]] = []

    @property
    def fingerprint(self) -> RuntimeFingerprint:
        return self.engines[0].fingerprint

    @property
    def n_leases(self) -> int:
        return 1

    def settle_captures(self, *, idle_s: float = 0.0, wait_s: float = 5.0) -> int:
        """Keep the derived states pending on the fake engine's context."""
        if not self._lock.acquire(timeout=wait_s):
            return 0
        try:
            return self.engines[0].context.settle()
        finally:
            self._lock.release()

    @contextmanager
    def lease(self, *, avoid: Sequence[int] = (), timeout_s: Optional[float] = None,
              prompt: Optional[Sequence[int]] = None, scope: str = "") -> Iterator[FakeLease]:
        from ..gateway.pool import NoSlotError

        if not self._lock.acquire(timeout=self.lease_timeout_s if timeout_s is None else timeout_s):
            raise NoSlotError(self.lease_timeout_s, 1)
        self.leases += 1
        self.prompts.append(None if prompt is None else tuple(prompt))
        try:
            yield FakeLease(0, 0, self.engines[0], scope)
        finally:
            self._lock.release()

    def status(self):
        from ..gateway.pool import PoolStatus

        leased = 1 if self._lock.locked() else 0
        server = {"index": 0, "pid": None, "url": "fake", "alive": True, "restarts": 0, "completions": self.leases}
        return PoolStatus((server,), 1, leased, 0)

    def close(self) -> None:
        """Nothing to stop."""
