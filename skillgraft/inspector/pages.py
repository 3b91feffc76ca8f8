"""The inspector's pages under ``/ui``: server-rendered HTML (Jinja2, autoescaped), read-only.

With an API key every page but the sign-in form needs the key: as ``Authorization: Bearer``
or as the session cookie the sign-in form sets (a random token of that sign-in, never the
key; signing out revokes it, and at most :data:`MAX_SESSIONS` live for :data:`SESSION_S`).
Without a key the app around it accepts loopback hosts only. Responses forbid scripts,
framing and any asset from elsewhere (CSP), and every redirect is relative: a foreign
``Host`` header is never sent back as a place to go.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from datetime import datetime
from importlib import resources
from typing import Callable, Optional
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from starlette.concurrency import run_in_threadpool

from ..errors import BlockNotFoundError, InputError, SkillgraftError, StoreError
from . import PREFIX, plots, views
from .sources import InspectorSource

COOKIE = "skillgraft_ui"
MAX_KEY_CHARS = 4096
MAX_FORM_FIELDS = 4
MAX_SESSIONS = 1_000  # the oldest is forgotten (signed out) when one more signs in
SESSION_S = 12 * 3600.0
STATIC = {"inspector.css": "text/css; charset=utf-8", "favicon.svg": "image/svg+xml"}
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _when(text: Optional[str]) -> str:
    if not text:
        return "—"
    try:
        return datetime.fromisoformat(text).strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return text


def _size(n: Optional[int]) -> str:
    if n is None:
        return "—"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1000
    return str(n)


def _interval(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def _environment() -> Environment:
    env = Environment(loader=PackageLoader("skillgraft.inspector", "templates"),
                      autoescape=select_autoescape(default=True), trim_blocks=True, lstrip_blocks=True)
    env.filters.update(when=_when, size=_size, seconds=plots.seconds_label, interval=_interval)
    env.globals.update(prefix=PREFIX)
    return env


class Access:
    """Who may see the pages: anyone (no API key) or holders of the key or of a session cookie."""

    def __init__(self, api_key: Optional[str], clock=time.monotonic) -> None:
        self.api_key, self.clock = api_key, clock
        self._sessions: dict[str, float] = {}  # token -> when it expires, oldest first
        self._lock = threading.Lock()

    def granted(self, request: Request) -> bool:
        if self.api_key is None:
            return True
        bearer = request.headers.get("authorization", "").encode()
        if hmac.compare_digest(bearer, f"Bearer {self.api_key}".encode()):
            return True
        token = request.cookies.get(COOKIE, "")
        with self._lock:
            expires = self._sessions.get(token) if token else None
            if expires is not None and expires < self.clock():
                del self._sessions[token]
                expires = None
        return expires is not None

    def key_matches(self, given: str) -> bool:
        return self.api_key is not None and hmac.compare_digest(given.encode(), self.api_key.encode())

    def open_session(self) -> str:
        """A fresh session token (the sign-in cookie)."""
        token = secrets.token_urlsafe(32)
        with self._lock:
            while len(self._sessions) >= MAX_SESSIONS:
                del self._sessions[next(iter(self._sessions))]
            self._sessions[token] = self.clock() + SESSION_S
        return token

    def close_session(self, token: str) -> None:
        with self._lock:
            self._sessions.pop(token, None)


def _status_of(exc: SkillgraftError) -> int:
    if isinstance(exc, BlockNotFoundError):
        return 404
    if isinstance(exc, InputError):
        return 400
    return 503 if isinstance(exc, StoreError) else 500


def inspector_router(source: InspectorSource, *, api_key: Optional[str] = None) -> APIRouter:
    """The ``/ui`` pages over ``source``."""
    router = APIRouter(prefix=PREFIX)
    env = _environment()
    access = Access(api_key)
    static = {name: resources.files(__package__).joinpath("static", name).read_bytes() for name in STATIC}

    def html(template: str, status: int = 200, **context) -> HTMLResponse:
        body = env.get_template(template).render(locked=api_key is not None, **context)
        return HTMLResponse(body, status_code=status, headers=HEADERS)

    def login(status: int, refused: bool = False) -> HTMLResponse:
        return html("login.html", status, refused=refused, title="Sign in", bare=True)

    async def page(request: Request, template: str, build: Callable[[], dict], **context) -> Response:
        if not access.granted(request):
            return login(401)
        try:
            found = await run_in_threadpool(build)
        except SkillgraftError as exc:
            return html("error.html", _status_of(exc), error=str(exc), **{**context, "title": "Error"})
        return html(template, **context, **found)

    @router.get("", response_class=HTMLResponse)
    async def skills(request: Request, q: str = "", sort: str = "created", order: str = "asc"):
        def build() -> dict:
            with source.reading() as store:
                rows = views.skill_rows(store, search=q, sort=sort, descending=order == "desc")
                total = len(store)
            return {"rows": rows, "total": total}

        return await page(request, "skills.html", build, title="Skills", q=q, sort=sort, order=order, sorts=list(views.SORTS))

    @router.get("/skills/{ref}", response_class=HTMLResponse)
    async def skill(request: Request, ref: str):
        def build() -> dict:
            with source.reading() as store:
                detail = views.skill_detail(store, ref)
            return {"skill": detail, "triggers": views.skill_triggers(source, detail.imported.name) if detail.imported else None}

        return await page(request, "skill.html", build, title="Skill")

    @router.get("/decisions", response_class=HTMLResponse)
    async def decisions(request: Request):
        def build() -> dict:
            with source.reading() as store:
                stats = views.decision_stats(store)
            return {"stats": stats, **_decision_plots(stats)}

        return await page(request, "decisions.html", build, title="Decisions")

    @router.get("/route", response_class=HTMLResponse)
    async def route(request: Request, q: str = ""):
        def build() -> dict:
            if not q.strip():
                return {"result": None}
            recall = source.recall(q)
            with source.reading() as store:
                result = views.route_view(store, q, recall)
            rows = [(c.name, c.score, c.block_id == recall.block_id) for c in result.candidates]
            plot = plots.score_bars("candidate scores", rows, recall.threshold) if rows else ""
            return {"result": result, "plot": Markup(plot)}

        return await page(request, "route.html", build, title="Try a query", q=q)

    @router.get("/cache", response_class=HTMLResponse)
    async def cache(request: Request):
        return await page(request, "cache.html", lambda: {"cache": source.cache()}, title="Cache")

    @router.get("/health", response_class=HTMLResponse)
    async def health(request: Request):
        def build() -> dict:
            with source.checking() as store:
                return {"health": views.health(store)}

        return await page(request, "health.html", build, title="Health")

    @router.get("/runtime", response_class=HTMLResponse)
    async def runtime(request: Request):
        return await page(request, "runtime.html", lambda: {"runtime": source.runtime()}, title="Runtime")

    @router.get("/login", response_class=HTMLResponse)
    async def login_form(request: Request):
        if api_key is None or access.granted(request):
            return RedirectResponse(PREFIX, status_code=303)
        return login(200)

    @router.post("/login")
    async def sign_in(request: Request):
        try:
            form = parse_qs((await request.body()).decode("utf-8", "replace"), max_num_fields=MAX_FORM_FIELDS)
        except ValueError:  # more fields than the form has
            return login(400, refused=True)
        given = (form.get("key") or [""])[0][:MAX_KEY_CHARS]
        if not access.key_matches(given):
            return login(401, refused=True)
        response = RedirectResponse(PREFIX, status_code=303, headers=HEADERS)
        response.set_cookie(COOKIE, access.open_session(), path=PREFIX, httponly=True, samesite="strict")
        return response

    @router.post("/logout")
    async def sign_out(request: Request):
        access.close_session(request.cookies.get(COOKIE, ""))
        response = RedirectResponse(PREFIX + "/login", status_code=303, headers=HEADERS)
        response.delete_cookie(COOKIE, path=PREFIX)
        return response

    @router.get("/", include_in_schema=False)
    async def with_slash():
        return RedirectResponse(PREFIX, status_code=307, headers=HEADERS)  # relative: never to the Host header's

    @router.get("/static/{name}")
    async def asset(name: str):
        if name not in static:
            return Response("not found", status_code=404, media_type="text/plain", headers=HEADERS)
        return Response(static[name], media_type=STATIC[name], headers={**HEADERS, "Cache-Control": "max-age=3600"})

    return router


def _decision_plots(stats: views.DecisionStats) -> dict:
    labels = [bucket.label for bucket in stats.buckets]
    series = [plots.Series(name, plots.colour_of(name)) for name in stats.decisions]
    over_time = plots.stacked_bars("answers per interval, by decision", labels, [b.counts for b in stats.buckets], series)
    avoided = plots.stacked_bars("prefill tokens avoided per interval", labels,
                                 [{"tokens avoided": b.avoided} for b in stats.buckets],
                                 [plots.Series("tokens avoided", plots.colour_of("graft"))])
    latency = plots.grouped_bars("answer time percentiles per decision",
                                 [(d, stats.latency[d]) for d in stats.decisions if d in stats.latency],
                                 list(views.PERCENTILES))
    return {"plot_decisions": Markup(over_time), "plot_avoided": Markup(avoided), "plot_latency": Markup(latency)}
