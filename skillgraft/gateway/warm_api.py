"""The gateway's background warms: ``/v1/skillgraft/warms`` (start, follow, stop).

``POST /v1/skillgraft/warms`` with ``{"skills": [NAME, ...], "app": APP}`` (``app`` optional: a
prefix stored with ``skillgraft apps add``) starts capturing, in the background, the KV state
each part of those skills gets on its first use behind that app's prompt
(:meth:`~skillgraft.skills.component.Skills.warm_in_background` over the memory of the
request's namespace); 202 with the warm. One warm runs at a time in a namespace (409 while one
runs). ``GET /v1/skillgraft/warms/{id}`` follows it: ``status`` (``running``, ``stopped``,
``done`` or ``failed``), ``done`` and ``total`` parts, and once it ended its ``report`` (or
``error``); ``?wait=S`` (at most 30 s) answers as soon as it moves on or ends. ``GET
/v1/skillgraft/warms`` lists the namespace's last warms; ``DELETE /v1/skillgraft/warms/{id}``
stops one after the part at hand (start it again to go on: what is kept is skipped).

Every route is a write (:func:`~skillgraft.gateway.access.is_write`): off unless deposits are
allowed, then the deposit key's or a namespace key's (for its namespace), rate-limited. Each
part takes a slot of the gateway's gate, then the memory's lock — the order a chat takes them
in (it holds its slot while it records) — so a warm never waits for a slot holding the lock,
and chats go first between parts.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Annotated, Optional

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from ..errors import AppNotFoundError, SkillgraftError
from ..memory import WarmJob
from ..skills.frontmatter import MAX_NAME_CHARS
from .access import WARM_ROOT, ApiError
from .captures import SlotThenLock
from .door import Door, door_of, tenant_of
from .service import Gateway

__all__ = ["Warms", "router"]

logger = logging.getLogger("skillgraft.gateway")

MAX_SKILLS = 256          # skills one warm names
MAX_KEPT = 16             # warms of a namespace kept to follow, the running one among them
MAX_WAIT_S = 30.0         # the longest a follow waits for a warm to move on
FOLLOW_POLL_S = 0.05


Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS)]


class WarmRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    skills: Annotated[list[Name], Field(min_length=1, max_length=MAX_SKILLS)]
    app: Optional[Name] = None


@dataclass
class Warm:
    """One background warm of a namespace, as its routes report it."""

    id: str
    skills: list
    app: Optional[str]
    job: WarmJob
    created: int
    logged: bool = False

    def as_dict(self) -> dict:
        status = self.job.state  # once: the job may end meanwhile
        done, total = self.job.progress
        row = {"object": "skill.warm", "id": self.id, "skills": self.skills, "app": self.app,
               "status": status, "done": done, "total": total, "created": self.created}
        if status in ("done", "stopped"):
            row["report"] = self.job.report.as_dict()
        elif status == "failed":
            row["error"] = self._told(self.job.error)
        return row

    def _told(self, error: BaseException) -> str:
        """What a client is told of the failure: a refusal's message, never an internal error's
        (that is logged, once)."""
        if isinstance(error, (SkillgraftError, ApiError)):
            return str(error)
        if not self.logged:
            self.logged = True
            logger.error("background warm %s failed", self.id, exc_info=error)
        return "internal error (see the gateway's log)"


class Warms:
    """The warms of a gateway's namespaces, the last :data:`MAX_KEPT` of each kept to follow."""

    def __init__(self) -> None:
        self.by_namespace: dict[str, OrderedDict[str, Warm]] = {}  # oldest first
        self.starting = asyncio.Lock()

    def of(self, tenant) -> "OrderedDict[str, Warm]":
        return self.by_namespace.setdefault(tenant.namespace, OrderedDict())

    def found(self, tenant, warm_id: str) -> Warm:
        warm = self.of(tenant).get(warm_id)
        if warm is None:
            raise ApiError(404, f"no warm {warm_id[:80]!r} in this namespace", code="warm_not_found")
        return warm

    async def start(self, door, tenant, body: WarmRequest) -> Warm:
        """A new warm of ``body``'s skills in ``tenant``'s namespace (409 while one runs there)."""
        async with self.starting:
            kept = self.of(tenant)
            running = next((w for w in kept.values() if w.job.running), None)
            if running is not None:
                raise ApiError(409, f"warm {running.id} is running in this namespace: stop it or wait for it",
                               code="warm_running")
            turn = SlotThenLock(door.slots, asyncio.get_running_loop(), tenant.memory_lock)
            job = await door.in_thread(_started, tenant, body, turn)
            warm = Warm(f"warm_{secrets.token_hex(12)}", list(dict.fromkeys(body.skills)), body.app, job,
                        int(time.time()))
            kept[warm.id] = warm
            while len(kept) > MAX_KEPT:
                kept.popitem(last=False)  # the oldest has ended: only one runs
        return warm


def _started(tenant, body: WarmRequest, turn: SlotThenLock) -> WarmJob:
    """The warm's job, started (names, app and prompt checked first, under the memory's lock)."""
    with tenant.memory_lock:
        try:
            return tenant.memory.skills.warm_in_background(body.skills, app=body.app, lock=turn)
        except AppNotFoundError as exc:
            raise ApiError(404, str(exc), code="app_not_found", param="app") from None


def warms_of(request: Request) -> Warms:
    """The app's :class:`Warms` (a FastAPI dependency), made on first use."""
    state = request.app.state
    if not hasattr(state, "warms"):
        state.warms = Warms()
    return state.warms


router = APIRouter()


@router.post(WARM_ROOT, status_code=202)
async def start_warm(body: WarmRequest, door: Door = Depends(door_of), tenant: Gateway = Depends(tenant_of),
                     warms: Warms = Depends(warms_of)):
    return (await warms.start(door, tenant, body)).as_dict()


@router.get(WARM_ROOT)
async def list_warms(tenant: Gateway = Depends(tenant_of), warms: Warms = Depends(warms_of)):
    return {"object": "list", "data": [warm.as_dict() for warm in reversed(warms.of(tenant).values())]}


@router.get(WARM_ROOT + "/{warm_id}")
async def follow_warm(warm_id: str, wait: float = 0.0, tenant: Gateway = Depends(tenant_of),
                      warms: Warms = Depends(warms_of)):
    if not 0 <= wait <= MAX_WAIT_S:
        raise ApiError(400, f"wait is 0 to {MAX_WAIT_S:g} seconds, got {wait:g}", param="wait")
    warm = warms.found(tenant, warm_id)
    seen, until = warm.job.progress, time.monotonic() + wait
    while warm.job.running and warm.job.progress == seen and time.monotonic() < until:
        await asyncio.sleep(FOLLOW_POLL_S)
    return warm.as_dict()


@router.delete(WARM_ROOT + "/{warm_id}")
async def stop_warm(warm_id: str, tenant: Gateway = Depends(tenant_of), warms: Warms = Depends(warms_of)):
    warm = warms.found(tenant, warm_id)
    warm.job.stop()
    return warm.as_dict()
