"""The gateway's verbs on imported skills (Agent Skills folders), for the OpenAI Skills API.

Reads go through the serving memory, writes through the gateway's writer, each under its
lock (:class:`~skillgraft.gateway.service.Gateway`); every decision is the memory's skills'
(``memory.skills``: :meth:`~skillgraft.skills.component.Skills.import_folders`, ``get``,
``versions``, ``remove``, ``set_default``, ``contents``). An upload (:mod:`.uploads`, checked) is
written into a temp folder and imported from there with the origin ``upload:<id>`` recorded
instead of the folder, which is removed afterwards.
"""

from __future__ import annotations

import tempfile
import uuid
from typing import Optional

from ..errors import SkillFolderError, SkillNotFoundError, SkillUploadError
from ..skills.frontmatter import parse_skill_md
from .uploads import SkillUpload, write_upload


class SkillShelf:
    """Imported skills through one gateway: list, read, add (a new skill or version), set the
    default version, remove, the files of a version."""

    def __init__(self, gateway) -> None:
        self.gateway = gateway

    def names(self, *, include_expired: bool = False) -> list[str]:
        """The names of the imported skills; those past their expiry only with ``include_expired``."""
        with self.gateway.memory_lock:
            return self.gateway.memory.skills.names(include_expired=include_expired)

    def skill(self, name: str, version: Optional[int] = None):
        """The :class:`~skillgraft.skills.versions.SkillRecord` of a version (the default by default)."""
        with self.gateway.memory_lock:
            return self.gateway.memory.skills.get(name, version)

    def versions(self, name: str) -> list:
        """The record of every version of ``name``, oldest first."""
        with self.gateway.memory_lock:
            return self.gateway.memory.skills.versions(name)

    def contents(self, name: str, version: Optional[int] = None) -> tuple[int, list[tuple[str, bytes]]]:
        with self.gateway.memory_lock:
            return self.gateway.memory.skills.contents(name, version)

    def add(self, upload: SkillUpload, *, skill: Optional[str] = None, default: bool = True,
            expires: Optional[str] = None) -> tuple[str, int]:
        """Import ``upload``: a new skill when ``skill`` is None (its name must be free), else a
        new version of ``skill`` (the upload must carry that name), made the default unless
        ``default`` is false; ``expires`` given sets the skill's expiry. An upload equal to a
        stored version is that version. Returns the skill's name and the version's number."""
        name = uploaded_name(upload)
        writer = self.gateway.writer
        with self.gateway.writer_lock:
            held = name in writer.skills.names(include_expired=True)
            if skill is None and held:
                raise SkillUploadError(name, f"a skill named {name!r} exists: upload a new version of it instead",
                                       "skill_exists")
            if skill is not None and name != skill:
                raise SkillUploadError(SKILL_MD, f"names the skill {name!r}, not {skill!r}", "name_mismatch")
            before = writer.skills.get(name).default_version if held else None
            with tempfile.TemporaryDirectory(prefix="skillgraft-upload-") as temp:
                folder = write_upload(upload, temp, upload.folder or name)
                report = writer.skills.import_folders([folder], origin=f"upload:{uuid.uuid4().hex[:12]}", expires=expires)
            if report.skipped:
                raise SkillFolderError(upload.folder or name, report.skipped[0]["reason"])
            if report.imported:
                version = report.imported[0].version
            elif report.unchanged:
                version = report.unchanged[0]["version"]
            else:
                raise SkillUploadError(upload.folder or name, "holds no skill that could be imported", "no_skill_md")
            if default and before != version:
                writer.skills.set_default(name, version)
            elif not default and before is not None and before != version:
                writer.skills.set_default(name, before)
            return name, version

    def set_default(self, name: str, version: int):
        with self.gateway.writer_lock:
            return self.gateway.writer.skills.set_default(name, version)

    def expire(self, name: str, at: Optional[str]) -> None:
        """Set skill ``name``'s expiry (None: none)."""
        with self.gateway.writer_lock:
            self.gateway.writer.expiry.set(name, at)

    def remove(self, name: str, version: Optional[int] = None) -> list[str]:
        """Remove one version of ``name``, or the whole skill; the ids of the blocks removed."""
        with self.gateway.writer_lock:
            return self.gateway.writer.skills.remove(name, version)

    def require(self, name: str) -> None:
        """:class:`SkillNotFoundError` unless ``name`` is an imported skill."""
        if name not in self.names():
            raise SkillNotFoundError(name)


SKILL_MD = "SKILL.md"


def uploaded_name(upload: SkillUpload) -> str:
    """The skill name an upload's ``SKILL.md`` gives (its frontmatter, as the import reads it)."""
    try:
        text = upload.skill_md.decode("utf-8")
    except UnicodeDecodeError:
        raise SkillUploadError(SKILL_MD, "is not UTF-8 text", "invalid_upload") from None
    if "\x00" in text:
        raise SkillUploadError(SKILL_MD, "holds NUL bytes", "invalid_upload")
    frontmatter, _ = parse_skill_md(text, upload.folder or "", [])
    return frontmatter.name
