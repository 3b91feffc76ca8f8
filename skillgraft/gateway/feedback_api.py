"""The gateway's routing corrections: ``/v1/skillgraft/skills/feedback`` (give, list, remove;
also at the older ``/v1/skills/feedback``).

``POST /v1/skills/feedback`` with ``{"query": ..., "expected": NAME | null}`` corrects the
routing of a query (:func:`skillgraft.routing.feedback.give_feedback`: a key of the block it
belongs to, or with ``null`` a negative); ``GET`` lists the corrections; ``DELETE
/v1/skills/feedback/{id}`` removes one. Giving and removing are writes: off unless deposits
are allowed (:mod:`skillgraft.gateway.access`). The routes call the gateway's verbs
(:meth:`~skillgraft.gateway.service.Gateway.feedback`, ``corrections``,
``remove_correction``); each correction is recorded as given by ``gateway:<client address>``.
"""

from __future__ import annotations

from typing import Annotated, Optional

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from .door import Door, door_of, tenant_of
from .service import Gateway

__all__ = ["router"]

MAX_QUERY_CHARS = 4_000


class FeedbackRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: Annotated[str, Field(min_length=1, max_length=MAX_QUERY_CHARS)]
    expected: Optional[Annotated[str, Field(min_length=1, max_length=200)]]


router = APIRouter()


def _by(request: Request) -> str:
    """Who gave a correction, as recorded: ``gateway:<client address>``."""
    return f"gateway:{request.client.host if request.client else 'unknown'}"


@router.post("/v1/skillgraft/skills/feedback")
@router.post("/v1/skills/feedback")
async def add_feedback(body: FeedbackRequest, request: Request, door: Door = Depends(door_of),
                       tenant: Gateway = Depends(tenant_of)):
    result = await door.in_thread(lambda: tenant.feedback(body.query, body.expected, by=_by(request)))
    return {"object": "skill.feedback", **result.as_dict()}


@router.get("/v1/skillgraft/skills/feedback")
@router.get("/v1/skills/feedback")
async def feedback_list(door: Door = Depends(door_of), tenant: Gateway = Depends(tenant_of)):
    rows = await door.in_thread(tenant.corrections)
    return {"object": "list", "data": [row.as_dict() for row in rows]}


@router.delete("/v1/skillgraft/skills/feedback/{correction_id}")
@router.delete("/v1/skills/feedback/{correction_id}")
async def feedback_remove(correction_id: int, request: Request, door: Door = Depends(door_of),
                          tenant: Gateway = Depends(tenant_of)):
    removed = await door.in_thread(lambda: tenant.remove_correction(correction_id, by=_by(request)))
    return {"object": "skill.feedback", "deleted": True, **removed.as_dict()}
