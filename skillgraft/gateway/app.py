"""The gateway's HTTP surface: an OpenAI-compatible chat API with a skill memory (FastAPI).

Every error leaves as an OpenAI-style error object (``{"error": {"message", "type",
"param", "code"}}``) with a 4xx status for anything the client can fix, 503 (retryable, with
``Retry-After``) when the servers are busy or restarting; never a traceback. With an API key
every route but ``/healthz`` needs ``Authorization: Bearer <key>``.
"""

from __future__ import annotations

import hmac
import json
import logging
import time
import uuid
from typing import Iterator, Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import (
    BlockNotFoundError,
    ConflictError,
    ContextOverflowError,
    DuplicateBlockError,
    InputError,
    NameTakenError,
    ServerError,
    SkillgraftError,
    StoreError,
    VerificationError,
)
from .pool import NoSlotError
from .schemas import ChatCompletionRequest, NewSkill
from .service import ChatAnswer, Gateway, GenerationOptions, MemoryNote, StreamEnd

logger = logging.getLogger("skillgraft.gateway")

MAX_BODY_BYTES = 4 << 20
DEFAULT_MAX_TOKENS = 256
RETRY_AFTER_S = "1"


class ApiError(Exception):
    """An error answered as an OpenAI-style error object."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error",
                 code: Optional[str] = None, param: Optional[str] = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.code, self.param = status, message, kind, code, param

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


def api_error(exc: BaseException) -> ApiError:
    """The HTTP form of an error raised while serving a request."""
    if isinstance(exc, ApiError):
        return exc
    message = str(exc)
    if isinstance(exc, ContextOverflowError):
        return ApiError(400, message, code="context_length_exceeded", param="messages")
    if isinstance(exc, InputError):
        return ApiError(400, message)
    if isinstance(exc, BlockNotFoundError):
        return ApiError(404, message, code="skill_not_found")
    if isinstance(exc, (NameTakenError, DuplicateBlockError, ConflictError)):
        return ApiError(409, message, code="conflict")
    if isinstance(exc, VerificationError):
        return ApiError(422, message, code="verification_failed")
    if isinstance(exc, NoSlotError):
        return ApiError(503, message, kind="server_error", code="busy")
    if isinstance(exc, (ServerError, StoreError)):
        return ApiError(503, message, kind="server_error", code="unavailable")
    if isinstance(exc, SkillgraftError):
        return ApiError(500, message, kind="server_error")
    logger.exception("unexpected error", exc_info=exc)
    return ApiError(500, "internal error (see the gateway's log)", kind="server_error")


def _json_error(error: ApiError) -> JSONResponse:
    headers = {"Retry-After": RETRY_AFTER_S} if error.status == 503 else None
    return JSONResponse(error.body(), status_code=error.status, headers=headers)


class BodyLimit:
    """ASGI middleware: refuse request bodies over ``limit`` bytes (413) before they are read whole."""

    def __init__(self, app, limit: int = MAX_BODY_BYTES) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        too_big = ApiError(413, f"the request body is over {self.limit} bytes", code="body_too_large")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            return await _json_error(too_big)(scope, receive, send)
        seen = 0

        async def limited_receive():
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise ApiError(413, too_big.message, code="body_too_large")
            return message

        return await self.app(scope, limited_receive, send)


def create_app(gateway: Gateway, *, api_key: Optional[str] = None) -> FastAPI:
    """The FastAPI application serving ``gateway``."""
    app = FastAPI(title="skillgraft gateway", docs_url=None, redoc_url=None, openapi_url=None)
    model_id = gateway.model_name

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError):
        gateway.metrics.error(exc.status)
        return _json_error(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
        gateway.metrics.error(400)
        return _json_error(ApiError(400, f"{where or 'body'}: {first.get('msg', 'invalid request')}", param=where or None))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return _json_error(ApiError(exc.status_code, str(exc.detail), code=code))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        error = api_error(exc)
        gateway.metrics.error(error.status)
        return _json_error(error)

    @app.middleware("http")
    async def _authorize(request: Request, call_next):
        if api_key is not None and request.url.path != "/healthz":
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
                return _json_error(ApiError(401, "a valid API key is required (Authorization: Bearer ...)",
                                            code="invalid_api_key"))
        try:
            return await call_next(request)
        except ApiError as exc:  # the body limit raises while the body is read
            return _json_error(exc)

    @app.get("/healthz")
    def healthz():
        status = gateway.pool.status()
        alive = all(server["alive"] for server in status.servers)
        return {
            "status": "ok" if alive else "degraded",
            "model": model_id,
            "servers": list(status.servers),
            "slots_total": status.slots_total,
            "slots_leased": status.slots_leased,
            "restarts": status.restarts,
        }

    @app.get("/metrics")
    def metrics():
        return Response(gateway.metrics.render(gateway.pool.status), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    def models():
        return {"object": "list", "data": [{"id": model_id, "object": "model", "created": 0, "owned_by": "skillgraft"}]}

    @app.post("/v1/chat/completions")
    def chat_completions(body: ChatCompletionRequest):
        if body.model != model_id:
            raise ApiError(404, f"model {body.model!r} is not served here; this gateway serves {model_id!r}",
                           code="model_not_found", param="model")
        if body.tools:
            raise ApiError(400, "tool calling is not supported by this gateway", param="tools")
        messages = [message.pair() for message in body.messages]
        options = GenerationOptions(
            max_tokens=body.max_completion_tokens or body.max_tokens or DEFAULT_MAX_TOKENS,
            temperature=body.temperature, seed=body.seed or 0, stop=body.stop_strings(),
        )
        completion_id = f"chatcmpl-{uuid.uuid4().hex}"
        try:
            if body.stream:
                events = gateway.stream(messages, options)
                return StreamingResponse(_sse(events, completion_id, model_id, gateway), media_type="text/event-stream")
            answer = gateway.chat(messages, options)
        except Exception as exc:
            raise api_error(exc) from None
        return _completion(answer, completion_id, model_id)

    @app.get("/v1/skills")
    def list_skills(kind: Optional[str] = None):
        if kind not in (None, "manual", "solution"):
            raise ApiError(400, f"kind must be manual or solution, got {kind!r}", param="kind")
        return {"object": "list", "data": [block.summary() for block in gateway.list_skills(kind)]}

    @app.post("/v1/skills", status_code=201)
    def add_skill(skill: NewSkill):
        try:
            if skill.kind == "manual":
                block = gateway.add_manual(skill.name, skill.text, description=skill.description, examples=skill.examples)
            else:
                block = gateway.add_solution(skill.question, skill.answer, skill.method, name=skill.name,
                                             examples=skill.examples)
        except Exception as exc:
            raise api_error(exc) from None
        return block.summary()

    @app.delete("/v1/skills/{ref}")
    def delete_skill(ref: str):
        try:
            block = gateway.delete_skill(ref)
        except Exception as exc:
            raise api_error(exc) from None
        return {"id": block.id, "name": block.name, "object": "skill", "deleted": True}

    return BodyLimit(app)


def _completion(answer: ChatAnswer, completion_id: str, model_id: str) -> dict:
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model_id,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": answer.text},
            "finish_reason": answer.finish_reason,
            "logprobs": None,
        }],
        "usage": {
            "prompt_tokens": answer.prompt_tokens,
            "completion_tokens": answer.completion_tokens,
            "total_tokens": answer.prompt_tokens + answer.completion_tokens,
        },
        "skillgraft": answer.note.as_dict(),
    }


def _sse(events: Iterator[object], completion_id: str, model_id: str, gateway: Gateway) -> Iterator[str]:
    """Server-sent events in OpenAI's ``chat.completion.chunk`` shape; an error mid-stream is
    sent as an ``error`` event (the ``openai`` client raises it)."""
    created = int(time.time())
    note: Optional[MemoryNote] = None

    def chunk(delta: dict, finish: Optional[str] = None) -> str:
        body = {
            "id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model_id,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
            "skillgraft": note.as_dict() if note else None,
        }
        return f"data: {json.dumps(body)}\n\n"

    try:
        for event in events:
            if isinstance(event, MemoryNote):
                note = event
                yield chunk({"role": "assistant", "content": ""})
            elif isinstance(event, StreamEnd):
                yield chunk({}, event.finish_reason)
            else:
                yield chunk({"content": event})
    except Exception as exc:
        error = api_error(exc)
        gateway.metrics.error(error.status)
        yield f"data: {json.dumps(error.body())}\n\n"
        return
    yield "data: [DONE]\n\n"
