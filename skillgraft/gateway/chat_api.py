"""The gateway's OpenAI-compatible chat surface: ``/v1/chat/completions`` (whole or streamed),
``/v1/models``, and ``/healthz`` and ``/metrics`` beside them.

A chat is checked, planned by the memory of the key's namespace (:meth:`Gateway.prepare`),
then answered in a slot of the gate (:meth:`Gateway.stream`); a client that leaves, while
waiting too, frees what it holds (499). The memory's decision goes out in the response headers
(:func:`~skillgraft.gateway.skills_api.decision_headers`) and as ``skillgraft`` in the body.
"""

from __future__ import annotations

import logging
import time
import uuid

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from ..core.answer import Answer, AnswerOptions
from ..core.deadline import Deadline
from ..core.pipeline import collect_choices
from .access import ApiError
from .door import Door, door_of, principal_of, tenant_of
from .http_errors import api_error
from .relay import ClientGone, ClosingStream, Departure, EventPump, SseWriter, relay, usage
from .schemas import ChatCompletionRequest
from .service import Gateway, whole_answer
from .skills_api import decision_headers

__all__ = ["router"]

logger = logging.getLogger("skillgraft.gateway")

DEFAULT_MAX_TOKENS = 256

router = APIRouter()


@router.get("/healthz")
async def healthz(door: Door = Depends(door_of)):
    status = door.gateway.pool.status()
    alive = all(server["alive"] for server in status.servers)
    health = {"status": "ok" if alive else "degraded", "model": door.model_id}
    if not door.keys:  # unauthenticated: with a key set, the servers' details stay private
        health.update(servers=list(status.servers), slots_total=status.slots_total,
                      slots_leased=status.slots_leased, restarts=status.restarts)
    return health


@router.get("/metrics")
async def metrics(door: Door = Depends(door_of)):
    gateway = door.gateway
    return Response(gateway.metrics.render(gateway.pool.status), media_type="text/plain; version=0.0.4")


def _model_card(model_id: str) -> dict:
    return {"id": model_id, "object": "model", "created": 0, "owned_by": "skillgraft"}


@router.get("/v1/models")
async def models(door: Door = Depends(door_of)):
    return {"object": "list", "data": [_model_card(door.model_id)]}


@router.get("/v1/models/{name}")
async def model(name: str, door: Door = Depends(door_of)):
    if name != door.model_id:
        raise ApiError(404, f"model {name!r} is not served here", code="model_not_found", param="model")
    return _model_card(door.model_id)


def _checked(body: ChatCompletionRequest, door: Door) -> None:
    """A 404 for another model, a 400 for a field this gateway does not take."""
    door.check_model(body.model)
    unsupported = body.unsupported()
    if unsupported:
        known = unsupported in type(body).model_fields
        why = "is not supported by this gateway as set" if known else "is not a field this gateway knows"
        raise ApiError(400, f"{unsupported} {why}; leave it out", param=unsupported, code="unsupported_field")


async def _options(body: ChatCompletionRequest, door: Door) -> AnswerOptions:
    """The answer's options; the response format's conversion runs off the event loop, one at a time."""
    async with door.formats:
        return await door.in_thread(lambda: AnswerOptions(
            max_tokens=body.max_completion_tokens or body.max_tokens or DEFAULT_MAX_TOKENS,
            temperature=body.temperature if body.temperature is not None else 0.0,
            top_p=body.top_p if body.top_p is not None else 1.0,
            seed=body.seed or 0, stop=body.stop_strings(), format=body.output_format(),
        ))


@router.post("/v1/chat/completions")
async def chat_completions(body: ChatCompletionRequest, request: Request, door: Door = Depends(door_of),
                           tenant: Gateway = Depends(tenant_of)):
    deadline = Deadline(tenant.request_timeout_s, "request")
    _checked(body, door)
    options = await _options(body, door)
    prepared = await door.in_thread(lambda: tenant.prepare(body.chat(), options.format, route=body.route()))
    events = lambda: tenant.stream(prepared, options, body.n or 1, deadline,  # noqa: E731
                                   scope=principal_of(request).scope(body.cache_salt()), buffered=not body.stream)
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    departure = Departure(request.receive)  # a client that leaves, while waiting too, frees what it holds
    pump, handed, acquired = None, False, False
    try:
        if prepared.needs_model:
            await departure.race(door.slots.acquire())
            acquired = True
        pump = EventPump(events(), door.slots.release if prepared.needs_model else lambda: None)
        if not body.stream:
            answers = collect_choices(prepared, iter(whole_answer(await pump.gather(departure))))
            return JSONResponse(_completion(answers, completion_id, door.model_id),
                                headers=decision_headers(answers[0].note))
        first = await departure.race(pump.next())  # errors before the first event get a status code
        handed = True  # the stream's response closes the pump from here on
    except ClientGone:
        logger.info("a client left before its answer was whole; its slot is free again")
        return Response(status_code=499)
    except Exception as exc:
        raise api_error(exc) from None
    finally:
        departure.stop()
        if pump is not None and not handed:
            await pump.close()  # gives the slot back
        elif pump is None and acquired:
            door.slots.release()
    sse = SseWriter(completion_id, door.model_id, bool(body.stream_options and body.stream_options.include_usage),
                    body.n or 1)
    return ClosingStream(relay(pump, first, sse, door.failed), pump, media_type="text/event-stream",
                         headers=decision_headers(first))


def _message(answer: Answer) -> dict:
    """An answer as OpenAI's assistant message: its text, or the tool calls it makes."""
    message = {"role": "assistant", "content": answer.text if answer.text or not answer.tool_calls else None}
    if answer.tool_calls:
        message["tool_calls"] = [call.as_openai() for call in answer.tool_calls]
    return message


def _completion(answers: list[Answer], completion_id: str, model_id: str) -> dict:
    prompt = answers[0].end.prompt_tokens
    completion = sum(answer.end.completion_tokens for answer in answers)
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model_id,
        "choices": [{
            "index": index,
            "message": _message(answer),
            "finish_reason": answer.end.finish_reason,
            "logprobs": None,
            "skillgraft": answer.note.as_dict(),
        } for index, answer in enumerate(answers)],
        "usage": usage(prompt, completion, answers[0].note.cache_n),
        "skillgraft": answers[0].note.as_dict(),
    }
