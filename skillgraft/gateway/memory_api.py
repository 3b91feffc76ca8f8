"""skillgraft's own skill routes: ``/v1/skillgraft/skills`` (list, add), a skill's background
capture (``.../{ref}/capture``) and deleting one (also at the older ``/v1/skills/{ref}``).

A manual is stored as text with no slot held (a capture asked for runs in the background, a
slot of the gate then the memory's lock per part); a solution is verified here, holding a slot.
Writes are deposits (:mod:`.access`)."""

from __future__ import annotations

import asyncio
from typing import Optional

from fastapi import APIRouter, Depends

from .access import ApiError
from .captures import SlotThenLock
from .door import Door, door_of, served, tenant_of
from .schemas import NewSkill
from .service import Gateway

__all__ = ["deposit", "router", "ref_router"]

router = APIRouter()
ref_router = APIRouter()  # paths by a skill ref: after the feedback and warm routes, whose paths they would take


async def deposit(skill: NewSkill, door: Door, tenant: Gateway) -> dict:
    """Store ``skill`` in ``tenant``'s memory: a manual as text, a solution verified (holding a slot)."""
    if skill.kind != "manual":
        block = await door.holding_slot(
            lambda: tenant.add_solution(skill.question, skill.answer, skill.method, name=skill.name,
                                        examples=skill.examples, expires=skill.expires_at))
        return served(block)
    block = await door.in_thread(lambda: tenant.add_manual(
        skill.name, skill.text, description=skill.description, examples=skill.examples, expires=skill.expires_at))
    if not skill.capture:
        return served(block)
    turn = SlotThenLock(door.slots, asyncio.get_running_loop(), tenant.memory_lock)
    return {**served(block), "capture": (await door.in_thread(tenant.captures.start, block, turn)).as_dict()}


@router.get("/v1/skillgraft/skills")
async def list_skills(kind: Optional[str] = None, door: Door = Depends(door_of), tenant: Gateway = Depends(tenant_of)):
    if kind not in (None, "manual", "solution"):
        raise ApiError(400, f"kind must be manual or solution, got {kind!r}", param="kind")
    blocks = await door.in_thread(tenant.list_skills, kind)
    return {"object": "list", "data": [served(block) for block in blocks]}


@router.post("/v1/skillgraft/skills", status_code=201)
async def add_skill(skill: NewSkill, door: Door = Depends(door_of), tenant: Gateway = Depends(tenant_of)):
    return await deposit(skill, door, tenant)


@ref_router.get("/v1/skillgraft/skills/{ref}/capture")
async def capture_status(ref: str, door: Door = Depends(door_of), tenant: Gateway = Depends(tenant_of)):
    status = await door.in_thread(tenant.capture_status, ref)
    if status is None:
        raise ApiError(404, f"no capture of skill {ref!r} was asked for on this gateway", code="not_found")
    return {"object": "skill.capture", **status.as_dict()}


@ref_router.delete("/v1/skillgraft/skills/{ref:path}")  # a name may hold '/', as GET reads it
@ref_router.delete("/v1/skills/{ref:path}")
async def delete_skill(ref: str, door: Door = Depends(door_of), tenant: Gateway = Depends(tenant_of)):
    block = await door.in_thread(tenant.delete_skill, ref)
    return {"id": block.id, "name": block.name, "object": "skill", "deleted": True}
