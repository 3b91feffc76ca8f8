"""What every route of the gateway's HTTP door is handed: the :class:`Door` (the gateway, its
slot gate, the calls run off the event loop) and, through FastAPI dependencies, the request's
tenant (:func:`tenant_of`) and principal (:func:`principal_of`). The routes are module-level
routers (:mod:`.chat_api`, :mod:`.memory_api`, ...) that :func:`~skillgraft.gateway.app.create_app`
composes; none keeps state of its own in a closure."""

from __future__ import annotations

import asyncio
from typing import Optional

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from .access import ApiError
from .http_errors import api_error
from .keys import LOCAL, ApiKeys, Principal
from .pool import NoSlotError
from .service import Gateway

__all__ = ["Door", "SlotGate", "door_of", "principal_of", "served", "tenant_of"]

# What a remote client is never shown of a skill: how long its verification took (a timing
# channel out of the sandbox) and a hash of what its method printed.
NOT_SERVED = ("verify_seconds", "verifier_output_sha256")


class SlotGate:
    """Requests that need a server slot wait here, on the event loop, not in a worker thread:
    waiting requests never use up the thread pool the running ones need."""

    def __init__(self, n_slots: int, timeout_s: float) -> None:
        self.n_slots, self.timeout_s = n_slots, timeout_s
        self._semaphore: Optional[asyncio.Semaphore] = None

    async def acquire(self) -> None:
        """Wait for a slot; none within the timeout is a 503 (one log line, no traceback)."""
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.n_slots)
        try:
            await asyncio.wait_for(self._semaphore.acquire(), self.timeout_s)
        except asyncio.TimeoutError:
            raise api_error(NoSlotError(self.timeout_s, self.n_slots)) from None

    def release(self) -> None:
        self._semaphore.release()


class Door:
    """The gateway as its routes use it: ``gateway`` (the base namespace's), its ``keys``, the
    ``slots`` gate, and ``formats`` (conversions of response formats, one at a time: their CPU
    never starves the event loop)."""

    def __init__(self, gateway: Gateway, keys: ApiKeys) -> None:
        self.gateway, self.keys = gateway, keys
        self.model_id = gateway.model_name
        self.slots = SlotGate(gateway.pool.n_leases, gateway.pool.lease_timeout_s)
        self.formats = asyncio.Semaphore(1)

    async def in_thread(self, function, *args):
        """``function(*args)`` off the event loop; its error as the HTTP error it leaves as."""
        try:
            return await run_in_threadpool(function, *args)
        except Exception as exc:
            raise api_error(exc) from None

    async def holding_slot(self, function, *args):
        """:meth:`in_thread` while holding a slot of the gate."""
        await self.slots.acquire()
        try:
            return await self.in_thread(function, *args)
        finally:
            self.slots.release()

    def failed(self, exc: BaseException) -> dict:
        """The error body a stream ends with, the error counted."""
        error = api_error(exc)
        self.gateway.metrics.error(error.status)
        return error.body()

    async def tenant(self, request: Request) -> Gateway:
        """The gateway of the namespace of the key ``request`` gave (:meth:`Gateway.tenant`),
        opened off the event loop on its namespace's first request."""
        namespace = principal_of(request).namespace
        opened = self.gateway.opened_tenant(namespace)
        return opened if opened is not None else await self.in_thread(self.gateway.tenant, namespace)

    def check_model(self, name: str) -> None:
        """A 404 unless ``name`` is the model served here."""
        if name != self.model_id:
            raise ApiError(404, f"model {name!r} is not served here; this gateway serves {self.model_id!r}",
                           code="model_not_found", param="model")


def door_of(request: Request) -> Door:
    """The :class:`Door` of the app serving ``request`` (a FastAPI dependency)."""
    return request.app.state.door


async def tenant_of(request: Request) -> Gateway:
    """The gateway of ``request``'s namespace (a FastAPI dependency): :meth:`Door.tenant`."""
    return await door_of(request).tenant(request)


def principal_of(request: Request) -> Principal:
    """Who sent ``request`` (:class:`~skillgraft.gateway.access.AccessCheck` says)."""
    return getattr(request.state, "principal", LOCAL)


def served(block) -> dict:
    """A skill as remote clients see it: its catalog summary less :data:`NOT_SERVED`."""
    row = block.summary()
    for name in NOT_SERVED:
        row.pop(name, None)
    return row
