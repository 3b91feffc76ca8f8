"""Block names the gateway's URL paths reach.

The gateway reads and deletes a block by name at ``/v1/skillgraft/skills/{name}`` and the older
``/v1/skills/{name}`` (a name may hold ``/``; characters such as ``?``, ``#``, ``%`` or spaces
are percent-encoded, as in any path). A few names never get there: another route takes their
path, or clients rewrite it before it is sent. :func:`route_problem` says why;
:func:`~skillgraft.memory.deposits.clean_name` refuses such a name for a new deposit or a rename.
A block stored under one before (by an older version, or in a bundle it wrote) keeps it and is
reached by its id.
"""

from __future__ import annotations

import re
from typing import Optional

from ..core.sha import SKILL_ID
from ..errors import InputError

__all__ = ["TAKEN_PATHS", "require_routable", "route_problem"]

# A whole name of each form, and the route that takes its path instead of the block's.
TAKEN_PATHS = (
    (re.compile(r"feedback"), "GET /v1/skillgraft/skills/feedback lists the routing corrections"),
    (re.compile(r"feedback/[^/]+"),
     "DELETE /v1/skillgraft/skills/{name} is the path that removes a routing correction"),
    (re.compile(r"(?P<ref>[^/]+)/capture"), "GET /v1/skillgraft/skills/{name} tells how the capture of {ref!r} stands"),
    (re.compile(SKILL_ID.pattern + r"(/.*)?", re.DOTALL),
     "/v1/skills/{name} is the OpenAI Skills API's path of a skill id ('skill_' and 32 hex digits)"),
)
DOT_SEGMENTS = frozenset({".", ".."})


def route_problem(name: str) -> Optional[str]:
    """Why a gateway path to a block named ``name`` does not reach it (the route that takes the
    path, or what rewrites it), or None when every path reaches it."""
    for form, route in TAKEN_PATHS:
        found = form.fullmatch(name)
        if found:
            return route.format(name=name, **found.groupdict()) + ", not the block"
    if DOT_SEGMENTS.intersection(name.split("/")):
        return "clients and URL normalisation remove a path segment '.' or '..' ('a/../b' is sent as 'b')"
    return None


def require_routable(name: str) -> str:
    """``name``, or :class:`InputError` saying why the gateway's paths cannot reach it."""
    problem = route_problem(name)
    if problem:
        raise InputError(f"the name {name!r} cannot be used in a URL path: {problem}; choose another name")
    return name
