"""The inspector: a read-only web page of a skill memory, at ``/ui`` of ``skillgraft serve``
and served alone for a local store by ``skillgraft ui``.

:mod:`.views` shapes what the store holds (skills, one skill, decisions over the latest
answers, health), :mod:`.plots` draws its plots as inline SVG, :mod:`.pages` serves the
HTML (templates and a stylesheet ship in the package: nothing is fetched at run time),
:mod:`.sources` reads a running gateway or a local store, :mod:`.local` runs ``skillgraft ui``.
Needs the ``serve`` extra.
"""

from __future__ import annotations

from typing import Optional

from .sources import InspectorSource, LocalSource

__all__ = ["InspectorSource", "LocalSource", "PREFIX", "guards_itself", "mount_inspector"]

PREFIX = "/ui"


def guards_itself(path: str) -> bool:
    """Whether ``path`` is the inspector's: it checks the API key itself (it also takes a sign-in cookie)."""
    return path == PREFIX or path.startswith(PREFIX + "/")


def mount_inspector(app, source: InspectorSource, *, api_key: Optional[str] = None, viewers=None) -> None:
    """Serve the inspector's pages for ``source`` under ``/ui`` of the FastAPI ``app``; ``viewers``
    says who holds a key (:class:`~.pages.Viewer`: a namespace's key sees that namespace)."""
    from .pages import inspector_router

    app.include_router(inspector_router(source, api_key=api_key, viewers=viewers))
