"""The gateway's HTTP surface: an OpenAI-compatible chat API with a skill memory (FastAPI).

Every error leaves as an OpenAI-style error object (``{"error": {"message", "type",
"param", "code"}}``) with a 4xx status for anything the client can fix, 503 (retryable, with
``Retry-After``) when the servers are busy or restarting; never a traceback. With an API key
every route but ``/healthz`` needs ``Authorization: Bearer <key>``.
"""

from __future__ import annotations

from typing import Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..deposit_policy import DepositPolicy
from ..inspector import mount_inspector
from . import chat_api, feedback_api, memory_api, openai_skills, skills_api, warm_api
from .access import ApiError, guard, json_error
from .door import Door, SlotGate, principal_of, served
from .http_errors import api_error
from .inspector_source import GatewaySource, viewer_of
from .keys import ApiKeys
from .service import Gateway

__all__ = ["SlotGate", "api_error", "create_app", "principal_of", "served"]


def create_app(gateway: Gateway, *, api_key: Optional[str] = None, allowed_hosts: Optional[list[str]] = None,
               deposits: DepositPolicy = DepositPolicy(), keys: Optional[ApiKeys] = None):
    """The ASGI application serving ``gateway``, behind :func:`skillgraft.gateway.access.guard`,
    accepting ``keys`` (:class:`~skillgraft.gateway.keys.ApiKeys`, or the one admin key
    ``api_key``): each chat's prefix reuse stays within its key's namespace (and its
    ``cache_salt``). Without a key only loopback Host headers are accepted (``allowed_hosts``),
    so a web page cannot reach it by DNS rebinding; skills are added or deleted only as
    ``deposits`` allow. The routes are the routers of :mod:`.chat_api`, :mod:`.openai_skills`,
    :mod:`.memory_api`, :mod:`.feedback_api`, :mod:`.warm_api` and :mod:`.skills_api`, in an
    order where no path by a skill ref takes another route's path, over one :class:`Door`."""
    keys = keys if keys is not None else ApiKeys.of(api_key)
    app = FastAPI(title="skillgraft gateway", docs_url=None, redoc_url=None, openapi_url=None,
                  redirect_slashes=False)  # its redirects would name the Host header's host
    app.state.door = Door(gateway, keys)
    _add_error_handlers(app, gateway)
    app.include_router(chat_api.router)
    # OpenAI's Skills API first: a /v1/skills path with a skill id is its; skillgraft's own
    # routes live under /v1/skillgraft/skills, the old /v1/skills paths kept where they do not collide.
    for router in (openai_skills.router, memory_api.router, feedback_api.router, warm_api.router,
                   memory_api.ref_router):
        app.include_router(router)
    mount_inspector(app, GatewaySource(gateway, keys.namespaces()), api_key=keys.inspector_key(),
                    viewers=viewer_of(keys) if keys.tenants else None)  # a namespace's key sees its namespace
    app.include_router(skills_api.router)
    return guard(app, keys=keys, allowed_hosts=allowed_hosts, deposits=deposits)


def _add_error_handlers(app: FastAPI, gateway: Gateway) -> None:
    """Every error leaves as an OpenAI-style error object, counted in the gateway's metrics."""

    def answered(error: ApiError):
        gateway.metrics.error(error.status)
        return json_error(error)

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError):
        return answered(exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
        return answered(ApiError(400, f"{where or 'body'}: {first.get('msg', 'invalid request')}", param=where or None))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return answered(ApiError(exc.status_code, str(exc.detail), code=code))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        return answered(api_error(exc))
