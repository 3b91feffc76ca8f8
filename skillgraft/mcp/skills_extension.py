"""The MCP Skills extension (SEP-2640, ``io.modelcontextprotocol/skills``) over the memory's
imported skills, through the SDK's extension hook (``MCPServer(extensions=[...])``).

It declares the extension (no ``directoryRead``: ``resources/directory/read`` is not served)
and serves ``skills/list`` (a page of :data:`PAGE` entries, the cursor the next name) and
``skills/get`` (by the URI of a ``SKILL.md``; an unknown one is error -32602). An entry is the
default version of a skill: ``{"uri": "skill://NAME/SKILL.md", "frontmatter", "resources":
[{"uri", "digest": "sha256:...", "size"}]}``, its files as imported (the manifest the import
recorded), each readable as the ``skill://NAME/PATH`` resource. The frontmatter is the
importer's reading of it (every field kept, made JSON-safe), so a field YAML types as a date
comes back as its text.
"""

from __future__ import annotations

import threading
from typing import Optional

EXTENSION_ID = "io.modelcontextprotocol/skills"
PAGE = 50
TTL_MS = 60_000


def skill_entry(record) -> dict:
    """A :class:`~skillgraft.skills.versions.SkillRecord` as the extension's ``Skill`` entry."""
    base = f"skill://{record.name}"
    return {
        "uri": f"{base}/SKILL.md",
        "frontmatter": {**record.frontmatter, "name": record.name, "description": record.description},
        "resources": [{"uri": f"{base}/{f['path']}", "digest": f"sha256:{f['sha256']}", "size": f["size"]}
                      for f in record.files],
    }


def skill_md_listing(memory) -> list[dict]:
    """Each skill's ``SKILL.md`` as a ``resources/list`` entry (``uri``, ``name``,
    ``description``, ``mime_type``), so a host without the extension finds the skills by
    scanning for ``skill://*/SKILL.md``; its other files stay behind the template."""
    return [{"uri": f"skill://{s.name}/SKILL.md", "name": s.name, "description": s.description,
             "mime_type": "text/markdown"} for s in memory.skills.list()]


def list_page(memory, cursor: Optional[str], page: int = PAGE) -> dict:
    """One page of entries, by name: those after the name ``cursor`` (past their expiry: none)."""
    names = [name for name in memory.skills.names() if cursor is None or name > cursor]
    result = {"skills": [skill_entry(memory.skills.get(name)) for name in names[:page]], "resultType": "complete",
              "ttlMs": TTL_MS, "cacheScope": "private"}
    if len(names) > page:
        result["nextCursor"] = names[page - 1]
    return result


def skills_extension(memory, lock: threading.Lock):
    """The extension object to pass to ``MCPServer(extensions=[...])``."""
    from mcp.server.extension import Extension, MethodBinding
    from mcp.shared.exceptions import MCPError
    from mcp_types import PaginatedRequestParams, RequestParams
    from mcp_types.jsonrpc import INVALID_PARAMS

    from ..errors import SkillNotFoundError

    class GetSkillParams(RequestParams):
        uri: str

    async def list_skills(ctx, params) -> dict:
        with lock:
            return list_page(memory, getattr(params, "cursor", None))

    async def get_skill(ctx, params) -> dict:
        uri = params.uri
        name = uri[len("skill://"):-len("/SKILL.md")] if uri.startswith("skill://") and uri.endswith("/SKILL.md") else ""
        with lock:
            try:
                if not name or "/" in name or name not in memory.skills.names():  # an expired skill is not served
                    raise SkillNotFoundError(name or uri)
                entry = skill_entry(memory.skills.get(name))
            except SkillNotFoundError:
                raise MCPError(INVALID_PARAMS, f"{uri!r} is not the SKILL.md of a skill served here") from None
        return {"skill": entry, "resultType": "complete", "ttlMs": TTL_MS, "cacheScope": "private"}

    class Skills(Extension):
        identifier = EXTENSION_ID

        def methods(self):
            return (MethodBinding("skills/list", PaginatedRequestParams, list_skills),
                    MethodBinding("skills/get", GetSkillParams, get_skill))

    return Skills()
