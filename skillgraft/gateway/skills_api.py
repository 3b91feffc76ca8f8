"""The gateway's skills API for hosts that run their own model, and the decision headers.

Under ``/v1/skillgraft/skills`` (and the older ``/v1/skills`` paths, where a path holding an
OpenAI skill id is the OpenAI Skills API's, :mod:`.openai_skills`): ``GET .../{ref}`` returns
one skill's text (:class:`~skillgraft.core.skill_text.SkillText`) and ``POST .../recall``
(``{"query": ...}``) the skill the memory routes a query to,
with the memory's note, score and reasons (:class:`~skillgraft.core.skill_text.SkillRecall`);
both are the gateway's verbs (:meth:`~skillgraft.gateway.service.Gateway.read_skill`,
:meth:`~skillgraft.gateway.service.Gateway.recall_skill`) over :mod:`skillgraft.core.skill_text`,
the one owner of a skill's text for a host. :func:`decision_headers` puts the memory's
decision into response headers, which OpenAI clients can read without parsing the body
(LangChain's ``ChatOpenAI`` with ``include_response_headers=True``).
"""

from __future__ import annotations

from typing import Annotated, Union
from urllib.parse import quote

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from ..core.answer import AnswerNote
from ..core.skill_text import SkillRecall
from .door import Door, door_of, tenant_of
from .schemas import MAX_TEXT_CHARS
from .service import Gateway

__all__ = ["DECISION_HEADER", "RecallRequest", "decision_headers", "router"]

DECISION_HEADER = "x-skillgraft-decision"


class RecallRequest(BaseModel):
    """``POST /v1/skills/recall``: the query to recall for."""

    model_config = ConfigDict(extra="forbid")

    query: Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS)]


def decision_headers(note: Union[AnswerNote, SkillRecall]) -> dict[str, str]:
    """The memory's decision as response headers: ``x-skillgraft-decision`` (a chat's note's:
    exact, graft, fallback or abstain; a skill recall's is the router's: exact, graft or
    abstain), ``x-skillgraft-score``, and when a block was used or tried ``x-skillgraft-block``
    (its id), ``x-skillgraft-block-name`` (percent-encoded) and, for a chat,
    ``x-skillgraft-cache-n``, and ``x-skillgraft-skills`` when its prompt held skills: each
    ``name@turn`` (name percent-encoded; turn 0 the first user turn), comma-separated, in the
    order they entered."""
    headers = {DECISION_HEADER: note.decision, "x-skillgraft-score": f"{float(note.score):.6g}"}
    if note.block_id:
        headers["x-skillgraft-block"] = note.block_id
    if note.block_name:
        headers["x-skillgraft-block-name"] = quote(note.block_name, safe="")
    if isinstance(note, AnswerNote):
        headers["x-skillgraft-cache-n"] = str(note.cache_n)
        if note.skills:
            headers["x-skillgraft-skills"] = ",".join(f"{quote(s['block_name'], safe='')}@{s['turn']}" for s in note.skills)
    return headers


router = APIRouter()  # last: its paths by a skill ref would take the others'


@router.post("/v1/skillgraft/skills/recall")
@router.post("/v1/skills/recall")
async def recall_skill(body: RecallRequest, door: Door = Depends(door_of), tenant: Gateway = Depends(tenant_of)):
    found = await door.in_thread(tenant.recall_skill, body.query)
    reply = {"object": "skill.recall", **found.model_dump(mode="json")}
    return JSONResponse(reply, headers=decision_headers(found))


@router.get("/v1/skillgraft/skills/{ref:path}")
@router.get("/v1/skills/{ref:path}")
async def get_skill(ref: str, door: Door = Depends(door_of), tenant: Gateway = Depends(tenant_of)):
    skill = await door.in_thread(tenant.read_skill, ref)
    return {"object": "skill", **skill.model_dump()}
