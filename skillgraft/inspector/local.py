"""``skillgraft ui``: the inspector alone, for a store on this host, on loopback only."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional, Union

from ..errors import ConfigError

START_PAGE = "/ui"


def inspector_app(source, *, allowed_hosts: list[str]):
    """A FastAPI app serving only the inspector (no API key: ``allowed_hosts`` are loopback names)."""
    from fastapi import FastAPI
    from fastapi.responses import RedirectResponse
    from starlette.middleware.trustedhost import TrustedHostMiddleware

    from . import mount_inspector

    app = FastAPI(title="skillgraft inspector", docs_url=None, redoc_url=None, openapi_url=None,
                  redirect_slashes=False)  # its redirects would name the Host header's host

    @app.get("/", include_in_schema=False)
    async def start():
        return RedirectResponse(START_PAGE, status_code=303)

    mount_inspector(app, source)
    return TrustedHostMiddleware(app, allowed_hosts=allowed_hosts)


def serve_inspector(home: Union[str, Path], *, host: str = "127.0.0.1", port: int = 8090,
                    catalog: Optional[str] = None, blocks: Optional[str] = None, model: Optional[str] = None,
                    ready: Optional[Callable[[str], None]] = None, namespace: Optional[str] = None) -> None:
    """Serve the inspector of the store at ``home`` (or of its ``namespace``'s store) until
    SIGINT/SIGTERM; ``ready(url)`` once it
    listens. Loopback only; the store must exist (nothing is created). No model is loaded,
    unless routing a query needs this runtime's fingerprint (blocks of several runtimes)."""
    from ..memory import SkillMemory
    from ..web.serving import LOOPBACK_HOSTS, is_loopback, run_app
    from ..web.http_guard import HttpLimits, protocol_class
    from .sources import LocalSource

    if not is_loopback(host):
        raise ConfigError(f"skillgraft ui listens on loopback only, not {host}: share a memory with `skillgraft serve --api-key`")
    memory = SkillMemory(Path(home).expanduser(), model=model, catalog=catalog, blocks=blocks, read_only=True,
                         namespace=namespace)
    try:
        app = inspector_app(LocalSource(memory), allowed_hosts=LOOPBACK_HOSTS)
        announce = None if ready is None else lambda url: ready(url + START_PAGE)
        run_app(app, host, port, ready=announce, http=protocol_class(HttpLimits()))  # the gateway's strict HTTP
    finally:
        memory.close()
