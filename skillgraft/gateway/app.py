"""The gateway's HTTP surface: an OpenAI-compatible chat API with a skill memory (FastAPI).

Every error leaves as an OpenAI-style error object (``{"error": {"message", "type",
"param", "code"}}``) with a 4xx status for anything the client can fix, 503 (retryable, with
``Retry-After``) when the servers are busy or restarting; never a traceback. With an API key
every route but ``/healthz`` needs ``Authorization: Bearer <key>``.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import (
    BlockNotFoundError,
    ConflictError,
    ContextOverflowError,
    DeadlineError,
    EncoderNotChosenError,
    DuplicateBlockError,
    FingerprintMismatchError,
    FormatError,
    InputError,
    NameTakenError,
    RouterError,
    ServerError,
    SharedBaseError,
    SkillgraftError,
    StoreError,
    VerificationError,
)
from ..verify.verifiers import withheld_refusal
from ..deposit_policy import DepositPolicy
from .access import ApiError, guard, json_error
from .keys import LOCAL, ApiKeys, Principal
from ..inspector import mount_inspector
from .inspector_source import GatewaySource, viewer_of
from .feedback_api import add_feedback_routes
from .pool import NoSlotError
from .schemas import ChatCompletionRequest, NewSkill
from ..core.answer import Answer, AnswerOptions
from ..core.deadline import Deadline
from ..core.pipeline import collect_choices
from .relay import ClientGone, ClosingStream, Departure, EventPump, SseWriter, relay
from .service import Gateway, whole_answer
from .openai_skills import register_openai_skill_routes
from .skills_api import decision_headers, register_skill_routes
from .captures import SlotThenLock
from .warm_api import add_warm_routes

logger = logging.getLogger("skillgraft.gateway")

DEFAULT_MAX_TOKENS = 256
# What a remote client is never shown of a skill: how long its verification took (a timing
# channel out of the sandbox) and a hash of what its method printed.
NOT_SERVED = ("verify_seconds", "verifier_output_sha256")


def api_error(exc: BaseException) -> ApiError:
    """The HTTP form of an error raised while serving a request."""
    if isinstance(exc, ApiError):
        return exc
    message = str(exc)
    if isinstance(exc, ContextOverflowError):
        return ApiError(400, message, code="context_length_exceeded", param="messages")
    if isinstance(exc, FormatError):
        return ApiError(400, message, code="unsupported_format", param=exc.field)
    if isinstance(exc, InputError):
        return ApiError(400, message)
    if isinstance(exc, BlockNotFoundError):
        return ApiError(404, message, code="skill_not_found")
    if isinstance(exc, (NameTakenError, DuplicateBlockError, ConflictError)):
        return ApiError(409, message, code="conflict")
    if isinstance(exc, SharedBaseError):
        return ApiError(403, message, code="read_only_base")
    if isinstance(exc, FingerprintMismatchError):
        return ApiError(409, message, code="fingerprint_mismatch")
    if isinstance(exc, VerificationError):
        # What a refused method printed is withheld: beyond the verdict, nothing leaves the sandbox.
        return ApiError(422, withheld_refusal(), code="verification_failed")
    if isinstance(exc, EncoderNotChosenError):
        return ApiError(503, message, kind="server_error", code="encoder_not_chosen")
    if isinstance(exc, DeadlineError):
        logger.warning("504: %s", message)
        return ApiError(504, message, kind="server_error", code="timeout")
    if isinstance(exc, NoSlotError):
        logger.warning("503 busy: %s", message)  # one line: a full gateway is no bug
        return ApiError(503, message, kind="server_error", code="busy")
    if isinstance(exc, (ServerError, StoreError, RouterError)):
        logger.warning("503 unavailable (%s): %s", type(exc).__name__, message)  # why, in one line
        return ApiError(503, message, kind="server_error", code="unavailable")
    if isinstance(exc, SkillgraftError):
        return ApiError(500, message, kind="server_error")
    logger.exception("unexpected error", exc_info=exc)
    return ApiError(500, "internal error (see the gateway's log)", kind="server_error")


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


def served(block) -> dict:
    """A skill as remote clients see it: its catalog summary less :data:`NOT_SERVED`."""
    row = block.summary()
    for name in NOT_SERVED:
        row.pop(name, None)
    return row


def create_app(gateway: Gateway, *, api_key: Optional[str] = None, allowed_hosts: Optional[list[str]] = None,
               deposits: DepositPolicy = DepositPolicy(), keys: Optional[ApiKeys] = None):
    """The ASGI application serving ``gateway``, behind :func:`skillgraft.gateway.access.guard`,
    accepting ``keys`` (:class:`~skillgraft.gateway.keys.ApiKeys`, or the one admin key
    ``api_key``): each chat's prefix reuse stays within its key's namespace (and its
    ``cache_salt``). Without a key only loopback Host headers are accepted (``allowed_hosts``),
    so a web page cannot reach it by DNS rebinding; skills are added or deleted only as
    ``deposits`` allow."""
    keys = keys if keys is not None else ApiKeys.of(api_key)
    app = FastAPI(title="skillgraft gateway", docs_url=None, redoc_url=None, openapi_url=None,
                  redirect_slashes=False)  # its redirects would name the Host header's host
    model_id = gateway.model_name
    slots = SlotGate(gateway.pool.n_leases, gateway.pool.lease_timeout_s)

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError):
        gateway.metrics.error(exc.status)
        return json_error(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
        gateway.metrics.error(400)
        return json_error(ApiError(400, f"{where or 'body'}: {first.get('msg', 'invalid request')}", param=where or None))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        gateway.metrics.error(exc.status_code)
        return json_error(ApiError(exc.status_code, str(exc.detail), code=code))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        error = api_error(exc)
        gateway.metrics.error(error.status)
        return json_error(error)

    async def in_thread(function, *args):
        try:
            return await run_in_threadpool(function, *args)
        except Exception as exc:
            raise api_error(exc) from None

    formats = asyncio.Semaphore(1)

    def failed(exc: BaseException) -> dict:
        error = api_error(exc)
        gateway.metrics.error(error.status)
        return error.body()

    async def holding_slot(function, *args):
        await slots.acquire()
        try:
            return await in_thread(function, *args)
        finally:
            slots.release()

    @app.get("/healthz")
    async def healthz():
        status = gateway.pool.status()
        alive = all(server["alive"] for server in status.servers)
        health = {"status": "ok" if alive else "degraded", "model": model_id}
        if not keys:  # unauthenticated: with a key set, the servers' details stay private
            health.update(servers=list(status.servers), slots_total=status.slots_total,
                          slots_leased=status.slots_leased, restarts=status.restarts)
        return health

    @app.get("/metrics")
    async def metrics():
        return Response(gateway.metrics.render(gateway.pool.status), media_type="text/plain; version=0.0.4")

    def model_card() -> dict:
        return {"id": model_id, "object": "model", "created": 0, "owned_by": "skillgraft"}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{name}")
    async def model(name: str):
        if name != model_id:
            raise ApiError(404, f"model {name!r} is not served here", code="model_not_found", param="model")
        return model_card()

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatCompletionRequest, request: Request):
        deadline = Deadline(gateway.request_timeout_s, "request")
        if body.model != model_id:
            raise ApiError(404, f"model {body.model!r} is not served here; this gateway serves {model_id!r}",
                           code="model_not_found", param="model")
        unsupported = body.unsupported()
        if unsupported:
            known = unsupported in type(body).model_fields
            why = "is not supported by this gateway as set" if known else "is not a field this gateway knows"
            raise ApiError(400, f"{unsupported} {why}; leave it out", param=unsupported, code="unsupported_field")
        async with formats:  # conversions one at a time: their CPU never starves the event loop
            options = await in_thread(lambda: AnswerOptions(
                max_tokens=body.max_completion_tokens or body.max_tokens or DEFAULT_MAX_TOKENS,
                temperature=body.temperature if body.temperature is not None else 0.0,
                top_p=body.top_p if body.top_p is not None else 1.0,
                seed=body.seed or 0, stop=body.stop_strings(), format=body.output_format(),
            ))
        n = body.n or 1
        tenant = await tenant_of(request)  # the memory of the key's namespace
        prepared = await in_thread(lambda: tenant.prepare(body.chat(), options.format, route=body.route()))
        scope = principal_of(request).scope(body.cache_salt())
        completion_id = f"chatcmpl-{uuid.uuid4().hex}"
        departure = Departure(request.receive)  # a client that leaves, while waiting too, frees what it holds
        pump, handed, acquired = None, False, False
        try:
            if prepared.needs_model:
                await departure.race(slots.acquire())
                acquired = True
            pump = EventPump(tenant.stream(prepared, options, n, deadline, scope=scope, buffered=not body.stream),
                             slots.release if prepared.needs_model else lambda: None)
            if not body.stream:
                events = await pump.gather(departure)
                answers = collect_choices(prepared, iter(whole_answer(events)))
                return JSONResponse(_completion(answers, completion_id, model_id), headers=decision_headers(answers[0].note))
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
                slots.release()
        usage = bool(body.stream_options and body.stream_options.include_usage)
        sse = SseWriter(completion_id, model_id, usage, n)
        return ClosingStream(relay(pump, first, sse, failed), pump, media_type="text/event-stream",
                             headers=decision_headers(first))

    async def tenant_of(request: Request) -> Gateway:
        """The gateway of the namespace of the key ``request`` gave (:meth:`Gateway.tenant`),
        opened off the event loop on its namespace's first request."""
        namespace = principal_of(request).namespace
        opened = gateway.opened_tenant(namespace)
        return opened if opened is not None else await in_thread(gateway.tenant, namespace)

    async def deposit(skill: NewSkill, request: Request) -> dict:
        tenant = await tenant_of(request)
        if skill.kind == "manual":  # stored as text, no slot held: a capture asked for runs in the background
            block = await in_thread(
                lambda: tenant.add_manual(skill.name, skill.text, description=skill.description, examples=skill.examples,
                                           expires=skill.expires_at)
            )
            if skill.capture:
                turn = SlotThenLock(slots, asyncio.get_running_loop(), tenant.memory_lock)
                return {**served(block), "capture": (await in_thread(tenant.captures.start, block, turn)).as_dict()}
        else:
            block = await holding_slot(
                lambda: tenant.add_solution(skill.question, skill.answer, skill.method, name=skill.name,
                                             examples=skill.examples, expires=skill.expires_at)
            )
        return served(block)

    # OpenAI's Skills API first: a /v1/skills path with a skill id is its; skillgraft's own
    # routes live under /v1/skillgraft/skills, the old /v1/skills paths kept where they do not collide.
    register_openai_skill_routes(app, tenant_of, in_thread, deposit)

    @app.get("/v1/skillgraft/skills")
    async def list_skills(request: Request, kind: Optional[str] = None):
        if kind not in (None, "manual", "solution"):
            raise ApiError(400, f"kind must be manual or solution, got {kind!r}", param="kind")
        blocks = await in_thread((await tenant_of(request)).list_skills, kind)
        return {"object": "list", "data": [served(block) for block in blocks]}

    @app.post("/v1/skillgraft/skills", status_code=201)
    async def add_skill(skill: NewSkill, request: Request):
        return await deposit(skill, request)

    add_feedback_routes(app, tenant_of, in_thread)
    add_warm_routes(app, tenant_of, in_thread, slots)

    @app.get("/v1/skillgraft/skills/{ref}/capture")
    async def capture_status(ref: str, request: Request):
        status = await in_thread((await tenant_of(request)).capture_status, ref)
        if status is None:
            raise ApiError(404, f"no capture of skill {ref!r} was asked for on this gateway", code="not_found")
        return {"object": "skill.capture", **status.as_dict()}

    @app.delete("/v1/skillgraft/skills/{ref:path}")  # a name may hold '/', as GET reads it
    @app.delete("/v1/skills/{ref:path}")
    async def delete_skill(ref: str, request: Request):
        block = await in_thread((await tenant_of(request)).delete_skill, ref)
        return {"id": block.id, "name": block.name, "object": "skill", "deleted": True}

    mount_inspector(app, GatewaySource(gateway, keys.namespaces()), api_key=keys.inspector_key(),
                    viewers=viewer_of(keys) if keys.tenants else None)  # a namespace's key sees its namespace
    register_skill_routes(app, tenant_of, in_thread)
    return guard(app, keys=keys, allowed_hosts=allowed_hosts, deposits=deposits)


def principal_of(request: Request) -> Principal:
    """Who sent ``request`` (:class:`~skillgraft.gateway.access.AccessCheck` says)."""
    return getattr(request.state, "principal", LOCAL)


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
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        "skillgraft": answers[0].note.as_dict(),
    }
