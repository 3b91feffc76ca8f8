"""Who may do what on the gateway, decided from a request's headers before its body is read.

ASGI middlewares, outermost first (:func:`guard`):

- :class:`AccessCheck`: with API keys (:class:`~skillgraft.gateway.keys.ApiKeys`) every route
  but ``/healthz`` needs ``Authorization: Bearer <key>`` (the inspector's pages under ``/ui``
  check an admin key themselves: they also take the cookie of their sign-in form), and the
  request's :class:`~skillgraft.gateway.keys.Principal` (its namespace) is put in its
  ``state``; when some key stands for a namespace of its own, ``/metrics`` is the admin keys'
  alone (it counts every namespace's reuse). The store's write routes (:func:`is_write`:
  ``POST`` under ``/v1/skills`` or ``/v1/skillgraft/skills`` but a recall, ``DELETE`` there,
  and the warms under ``/v1/skillgraft/warms``) are off unless deposits are allowed, then need
  the deposit key (when one is set), which writes to the ``default`` namespace (the base the
  others read), or a key of a namespace of its own, which writes to that namespace alone; they
  are rate-limited per credential (the key used), per address only when there is none (all of
  loopback one client, IPv6 by ``/64``), and for all clients together (:class:`DepositRate`);
- Starlette's trusted-host check (loopback ``Host`` headers only when no API key is set);
- :class:`BodyLimit`: the body, read whole, at most ``limit`` bytes.

A refusal made before the body is read closes the connection, so an unread body never frames
the next request.
"""

from __future__ import annotations

import hmac
from typing import Optional

from fastapi.responses import JSONResponse
from starlette.middleware.trustedhost import TrustedHostMiddleware

from ..deposit_policy import DepositPolicy, DepositRate
from ..inspector import guards_itself
from ..web.clients import address_key, credential_key
from ..memory.namespaces import DEFAULT_NAMESPACE
from .keys import ApiKeys, Principal

MAX_BODY_BYTES = 4 << 20
RETRY_AFTER_S = "1"


class ApiError(Exception):
    """An error answered as an OpenAI-style error object."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error",
                 code: Optional[str] = None, param: Optional[str] = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.code, self.param = status, message, kind, code, param

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


def json_error(error: ApiError, *, close: bool = False, retry_after: Optional[str] = None) -> JSONResponse:
    """The response for ``error``; ``close`` ends the connection after it (its body was not read)."""
    headers = {}
    if error.status in (429, 503):
        headers["Retry-After"] = retry_after or RETRY_AFTER_S
    if close:
        headers["Connection"] = "close"
    return JSONResponse(error.body(), status_code=error.status, headers=headers or None)


SKILL_ROOTS = ("/v1/skills", "/v1/skillgraft/skills")
WARM_ROOT = "/v1/skillgraft/warms"


def is_write(scope) -> bool:
    """Whether a request changes the store: any ``POST`` under a skills root but a recall (adds a
    skill or a version, sets a default version, gives a routing correction), any ``DELETE``, and
    every request about background warms (they fill the store's KV cache)."""
    path, method = scope.get("path", "").rstrip("/"), scope.get("method", "")
    if path == WARM_ROOT or path.startswith(WARM_ROOT + "/"):
        return True
    for root in SKILL_ROOTS:
        if path == root or path.startswith(root + "/"):
            return method == "DELETE" or (method == "POST" and path != root + "/recall")
    return False


def _bearer(scope) -> bytes:
    return dict(scope.get("headers") or []).get(b"authorization", b"")


class AccessCheck:
    """ASGI middleware: the API keys (who the request is), then for writes the deposit switch,
    key and rate."""

    def __init__(self, app, keys: ApiKeys, deposits: DepositPolicy) -> None:
        self.app, self.deposits, self.keys = app, deposits, keys
        self.deposit_key = f"Bearer {deposits.key}".encode() if deposits.key else None
        self.rate = DepositRate(deposits.per_minute)

    def refusal(self, scope) -> Optional[tuple[ApiError, Optional[str]]]:
        if not is_write(scope):
            path = scope.get("path", "")
            principal = self.keys.principal(_bearer(scope))
            if principal is None and path != "/healthz" and not guards_itself(path):
                return ApiError(401, "a valid API key is required (Authorization: Bearer ...)", code="invalid_api_key"), None
            if path.rstrip("/") == "/metrics" and self.keys.tenants and not principal.admin:
                return ApiError(403, "/metrics counts every namespace: it needs an admin key", code="admin_only"), None
            if principal is not None:
                scope.setdefault("state", {})["principal"] = principal
            return None
        if not self.deposits.allowed:
            return ApiError(403, "this gateway takes no deposits: its operator starts it with --allow-deposits to add "
                                 "or delete skills over HTTP", code="deposits_disabled"), None
        tenant = self._tenant(scope)
        if tenant is not None:
            scope.setdefault("state", {})["principal"] = tenant
        elif self.deposit_key and not hmac.compare_digest(_bearer(scope), self.deposit_key):
            return ApiError(401, "adding or deleting skills needs the deposit key or a namespace's key "
                                 "(Authorization: Bearer ...)", code="invalid_deposit_key"), None
        client = (scope.get("client") or ("",))[0]
        who = credential_key(_bearer(scope)) if self.deposit_key or tenant else address_key(client)
        wait = self.rate.take(who)
        if wait:
            message = f"over {self.deposits.per_minute:g} writes a minute (this client's, or all clients' together); " \
                      f"retry in {wait:.0f} s"
            return ApiError(429, message, code="rate_limit_exceeded"), str(max(1, round(wait)))
        return None

    def _tenant(self, scope) -> Optional[Principal]:
        """The principal of a key of a namespace of its own (it writes there), else None."""
        if not self.keys:
            return None
        principal = self.keys.principal(_bearer(scope))
        if principal is None or principal.admin or principal.namespace == DEFAULT_NAMESPACE:
            return None
        return principal

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            refused = self.refusal(scope)
            if refused is not None:
                error, retry_after = refused
                return await json_error(error, close=True, retry_after=retry_after)(scope, receive, send)
        return await self.app(scope, receive, send)


class BodyLimit:
    """ASGI middleware: read a request body whole (at most ``limit`` bytes, else 413) before the
    app sees it, whatever its transfer encoding."""

    def __init__(self, app, limit: int = MAX_BODY_BYTES) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        too_big = ApiError(413, f"the request body is over {self.limit} bytes", code="body_too_large")
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and _declared_over(declared, self.limit):
            return await json_error(too_big, close=True)(scope, receive, send)
        body, more = bytearray(), True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.limit:
                return await json_error(too_big, close=True)(scope, receive, send)
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()  # later reads wait for the client to disconnect

        return await self.app(scope, replay, send)


def _declared_over(declared: bytes, limit: int) -> bool:
    """Whether a Content-Length is not a count of bytes within ``limit`` (read without turning
    thousands of digits into an int, which Python refuses)."""
    digits = declared.lstrip(b"0") or b"0"
    return not declared.isdigit() or len(digits) > len(str(limit)) or int(digits) > limit


def guard(app, *, allowed_hosts: Optional[list[str]], deposits: DepositPolicy, api_key: Optional[str] = None,
          keys: Optional[ApiKeys] = None):
    """``app`` behind the checks above, header checks outermost and the body read last; ``keys``
    (or the one admin key ``api_key``) are the keys accepted."""
    inner = BodyLimit(app)
    if allowed_hosts is not None:
        inner = TrustedHostMiddleware(inner, allowed_hosts=allowed_hosts)
    return AccessCheck(inner, keys if keys is not None else ApiKeys.of(api_key), deposits)
