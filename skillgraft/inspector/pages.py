"""The inspector's pages under ``/ui``: server-rendered HTML (Jinja2, autoescaped), read-only.

With an API key every page but the sign-in form needs the key: as ``Authorization: Bearer``
or as the session cookie the sign-in form sets (a random token of that sign-in, never the
key; signing out revokes it, and at most :data:`MAX_SESSIONS` live for :data:`SESSION_S`).
Who holds the key (a :class:`Viewer`) chooses what is shown: an admin the source's own memory
(or, with ``?namespace=NAME``, that namespace's), anyone else their namespace's memory only.
Without a key the app around it accepts loopback hosts only. Responses forbid scripts,
framing and any asset from elsewhere (CSP), and every redirect is relative: a foreign
``Host`` header is never sent back as a place to go.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Callable, Optional
from urllib.parse import parse_qs

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from starlette.concurrency import run_in_threadpool

from ..errors import BlockNotFoundError, InputError, SkillgraftError, StoreError
from . import PREFIX, plots, skill_list, views
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


def _whole(text: str, what: str) -> int:
    """A page number or size given in the query: digits only (else :class:`InputError`, a 400 page)."""
    if not (text.isascii() and text.isdigit()) or len(text) > 6:
        raise InputError(f"{what} must be a whole number, got {text[:20]!r}")
    return int(text)


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


@dataclass(frozen=True)
class Viewer:
    """Who is looking: ``namespace`` None for the source's own memory; only an ``admin`` may pick another."""

    namespace: Optional[str] = None
    admin: bool = True


Viewers = Callable[[str], Optional[Viewer]]  # who holds a key (None: nobody it opens the pages to)


class Access:
    """Who may see the pages: anyone (no API key) or holders of a key (the API key, or one
    ``viewers`` knows) or of a session cookie, each as the :class:`Viewer` the key is."""

    def __init__(self, api_key: Optional[str], clock=time.monotonic, viewers: Optional[Viewers] = None) -> None:
        self.api_key, self.clock = api_key, clock
        self.viewers = viewers or self._admin_key
        self.locked = api_key is not None or viewers is not None
        self._sessions: dict[str, tuple[float, Viewer]] = {}  # token -> (when it expires, who), oldest first
        self._lock = threading.Lock()

    def _admin_key(self, given: str) -> Optional[Viewer]:
        if self.api_key is not None and hmac.compare_digest(given.encode(), self.api_key.encode()):
            return Viewer()
        return None

    def granted(self, request: Request) -> Optional[Viewer]:
        """Who ``request`` is (None: not let in)."""
        if not self.locked:
            return Viewer()
        bearer = request.headers.get("authorization", "")
        if bearer.startswith("Bearer ") and len(bearer) <= MAX_KEY_CHARS:
            found = self.viewers(bearer[len("Bearer "):])
            if found is not None:
                return found
        token = request.cookies.get(COOKIE, "")
        with self._lock:
            session = self._sessions.get(token) if token else None
            if session is not None and session[0] < self.clock():
                del self._sessions[token]
                session = None
        return session[1] if session is not None else None

    def key_matches(self, given: str) -> Optional[Viewer]:
        return self.viewers(given) if self.locked else None

    def open_session(self, viewer: Viewer = Viewer()) -> str:
        """A fresh session token (the sign-in cookie) for ``viewer``."""
        token = secrets.token_urlsafe(32)
        with self._lock:
            while len(self._sessions) >= MAX_SESSIONS:
                del self._sessions[next(iter(self._sessions))]
            self._sessions[token] = (self.clock() + SESSION_S, viewer)
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


class InspectorPages:
    """The ``/ui`` pages over one source: its templates, who may see them and the packaged assets,
    with a handler per page (:meth:`router` serves them)."""

    def __init__(self, source: InspectorSource, access: Access) -> None:
        self.source, self.access = source, access
        self.env = _environment()
        self.static = {name: resources.files(__package__).joinpath("static", name).read_bytes() for name in STATIC}

    def router(self) -> APIRouter:
        """The pages, in the order they are matched."""
        router = APIRouter(prefix=PREFIX)
        for path, handler in (("", self.skills), ("/skills/{ref}", self.skill), ("/decisions", self.decisions),
                              ("/route", self.route), ("/cache", self.cache), ("/health", self.health),
                              ("/runtime", self.runtime), ("/login", self.login_form)):
            router.add_api_route(path, handler, methods=["GET"], response_class=HTMLResponse)
        router.add_api_route("/login", self.sign_in, methods=["POST"])
        router.add_api_route("/logout", self.sign_out, methods=["POST"])
        router.add_api_route("/", self.with_slash, methods=["GET"], include_in_schema=False)
        router.add_api_route("/static/{name}", self.asset, methods=["GET"])
        return router

    def _html(self, template: str, status: int = 200, **context) -> HTMLResponse:
        body = self.env.get_template(template).render(locked=self.access.locked, **context)
        return HTMLResponse(body, status_code=status, headers=HEADERS)

    def _login(self, status: int, refused: bool = False) -> HTMLResponse:
        return self._html("login.html", status, refused=refused, title="Sign in", bare=True)

    def _shown(self, viewer: Viewer, request: Request) -> InspectorSource:
        """What ``viewer`` sees: their namespace's memory; an admin the source's, or the one picked."""
        picked = request.query_params.get("namespace") if viewer.admin else None
        name = picked or viewer.namespace
        return self.source if name is None else self.source.namespace(name)

    async def _page(self, request: Request, template: str, build: Callable[[InspectorSource], dict],
                    **context) -> Response:
        """``template`` filled with what ``build`` reads from the memory the viewer sees (the
        sign-in form for nobody, the error page when reading fails)."""
        viewer = self.access.granted(request)
        if viewer is None:
            return self._login(401)
        try:
            found = await run_in_threadpool(lambda: build(self._shown(viewer, request)))
        except SkillgraftError as exc:
            return self._html("error.html", _status_of(exc), error=str(exc), **{**context, "title": "Error"})
        return self._html(template, **context, **found)

    async def skills(self, request: Request, q: str = "", sort: str = "created", order: str = "asc",
                     page_no: str = Query("1", alias="page"), size: str = str(skill_list.PAGE_SIZE)):
        def build(source: InspectorSource) -> dict:
            number, rows = _whole(page_no, "page"), _whole(size, "size")
            with source.reading_all() as stores:  # a namespace's own skills, then the base's
                listing = skill_list.skill_page(stores, search=q, sort=sort, descending=order == "desc", page=number,
                                                size=rows, count=source.known_tokens)
            return {"listing": listing, "rows": listing.rows}

        return await self._page(request, "skills.html", build, title="Skills", q=q, sort=sort, order=order,
                                sorts=list(skill_list.SORTS), namespace=request.query_params.get("namespace"),
                                default_size=skill_list.PAGE_SIZE)

    async def skill(self, request: Request, ref: str):
        return await self._page(request, "skill.html", lambda source: _skill(source, ref), title="Skill")

    async def decisions(self, request: Request):
        return await self._page(request, "decisions.html", _decisions, title="Decisions")

    async def route(self, request: Request, q: str = ""):
        return await self._page(request, "route.html", lambda source: _route(source, q), title="Try a query", q=q)

    async def cache(self, request: Request):
        return await self._page(request, "cache.html", lambda source: {"cache": source.cache()}, title="Cache")

    async def health(self, request: Request):
        return await self._page(request, "health.html", _health, title="Health")

    async def runtime(self, request: Request):
        return await self._page(request, "runtime.html", lambda source: {"runtime": source.runtime()}, title="Runtime")

    async def login_form(self, request: Request):
        if not self.access.locked or self.access.granted(request) is not None:
            return RedirectResponse(PREFIX, status_code=303)
        return self._login(200)

    async def sign_in(self, request: Request):
        try:
            form = parse_qs((await request.body()).decode("utf-8", "replace"), max_num_fields=MAX_FORM_FIELDS)
        except ValueError:  # more fields than the form has
            return self._login(400, refused=True)
        given = (form.get("key") or [""])[0][:MAX_KEY_CHARS]
        viewer = self.access.key_matches(given)
        if viewer is None:
            return self._login(401, refused=True)
        response = RedirectResponse(PREFIX, status_code=303, headers=HEADERS)
        response.set_cookie(COOKIE, self.access.open_session(viewer), path=PREFIX, httponly=True, samesite="strict")
        return response

    async def sign_out(self, request: Request):
        self.access.close_session(request.cookies.get(COOKIE, ""))
        response = RedirectResponse(PREFIX + "/login", status_code=303, headers=HEADERS)
        response.delete_cookie(COOKIE, path=PREFIX)
        return response

    async def with_slash(self):
        return RedirectResponse(PREFIX, status_code=307, headers=HEADERS)  # relative: never to the Host header's

    async def asset(self, name: str):
        if name not in self.static:
            return Response("not found", status_code=404, media_type="text/plain", headers=HEADERS)
        return Response(self.static[name], media_type=STATIC[name], headers={**HEADERS, "Cache-Control": "max-age=3600"})


def inspector_router(source: InspectorSource, *, api_key: Optional[str] = None,
                     viewers: Optional[Viewers] = None) -> APIRouter:
    """The ``/ui`` pages over ``source``, or over the namespace of who signed in (``viewers``)."""
    return InspectorPages(source, Access(api_key, viewers=viewers)).router()


def _skill(source: InspectorSource, ref: str) -> dict:
    with source.reading_all() as stores:
        detail = views.skill_detail(stores, ref)
        tokens = source.known_tokens(detail.block) if detail.block.text_only else None
    triggers = views.skill_triggers(source, detail.imported.name) if detail.imported else None
    return {"skill": detail, "tokens": tokens, "triggers": triggers}


def _decisions(source: InspectorSource) -> dict:
    with source.reading() as store:
        stats = views.decision_stats(store)
    return {"stats": stats, **_decision_plots(stats)}


def _route(source: InspectorSource, query: str) -> dict:
    """Where ``query`` routes, with its candidates' scores plotted (nothing for a blank query)."""
    if not query.strip():
        return {"result": None}
    recall = source.recall(query)
    with source.reading_all() as stores:
        result = views.route_view(stores, query, recall)
    rows = [(c.name, c.score, c.block_id == recall.block_id) for c in result.candidates]
    plot = plots.score_bars("candidate scores", rows, recall.threshold) if rows else ""
    return {"result": result, "plot": Markup(plot)}


def _health(source: InspectorSource) -> dict:
    with source.checking() as store:
        return {"health": views.health(store)}


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
