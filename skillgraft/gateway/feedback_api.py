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

from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field

MAX_QUERY_CHARS = 4_000


class FeedbackRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: Annotated[str, Field(min_length=1, max_length=MAX_QUERY_CHARS)]
    expected: Optional[Annotated[str, Field(min_length=1, max_length=200)]]


def add_feedback_routes(app, tenant_of, in_thread) -> None:
    """Add the feedback routes to ``app``, each over the request's namespace (``await
    tenant_of(request)``: its gateway); ``in_thread`` runs a call off the event loop and turns a
    :class:`SkillgraftError` into its HTTP error."""

    def by(request: Request) -> str:
        return f"gateway:{request.client.host if request.client else 'unknown'}"

    @app.post("/v1/skillgraft/skills/feedback")
    @app.post("/v1/skills/feedback")
    async def add_feedback(body: FeedbackRequest, request: Request):
        gateway = await tenant_of(request)
        result = await in_thread(lambda: gateway.feedback(body.query, body.expected, by=by(request)))
        return {"object": "skill.feedback", **result.as_dict()}

    @app.get("/v1/skillgraft/skills/feedback")
    @app.get("/v1/skills/feedback")
    async def feedback_list(request: Request):
        rows = await in_thread((await tenant_of(request)).corrections)
        return {"object": "list", "data": [row.as_dict() for row in rows]}

    @app.delete("/v1/skillgraft/skills/feedback/{correction_id}")
    @app.delete("/v1/skills/feedback/{correction_id}")
    async def feedback_remove(correction_id: int, request: Request):
        gateway = await tenant_of(request)
        removed = await in_thread(lambda: gateway.remove_correction(correction_id, by=by(request)))
        return {"object": "skill.feedback", "deleted": True, **removed.as_dict()}
