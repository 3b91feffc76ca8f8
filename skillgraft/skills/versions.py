"""An imported skill as one thing above its blocks: its versions' records, removal, export and
the changes of its folder on disk (:class:`~.component.Skills` calls them)."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Optional, Union

from ..core.expiry import expired
from ..errors import BlockNotFoundError, InputError, SkillFolderError
from .folder import manifest_sha256, read_skill_folder, SkillFile
from .frontmatter import spec_problems
from .plan import EARLIER_KEY_POLICY, recorded_policy


@dataclass(frozen=True)
class SkillPart:
    """One block of a skill version: ``section`` (its heading path) or ``resource`` (its path).
    ``n_tokens`` is None for a text block while no model is loaded (a listing never loads one);
    ``n_chars`` is the size of its text."""

    block_id: str
    block_name: str
    role: str
    title: str
    n_tokens: Optional[int]
    n_chars: int = 0


@dataclass(frozen=True)
class SkillRecord:
    """One version of an imported skill, as ``skills show`` prints it. ``frontmatter`` holds
    every field as given (``license``, ``compatibility``, ``metadata``, ``allowed-tools`` are
    shown, never treated as permissions); ``scripts`` and ``assets`` are listed, never run."""

    name: str
    version: int
    default_version: int
    versions: list
    description: str
    folder: str
    manifest_sha256: str
    model_invocable: bool
    frontmatter: dict
    files: list
    scripts: list
    assets: list
    parts: list
    warnings: list
    created_at: str = ""
    keys: str = EARLIER_KEY_POLICY  # the key policy the version was imported under
    expires_at: Optional[str] = None  # the skill's expiry (every version's), None for none

    @property
    def n_tokens(self) -> Optional[int]:
        """The tokens of its parts; None while one of them is not counted (see :class:`SkillPart`)."""
        counts = [part.n_tokens for part in self.parts]
        return None if None in counts else sum(counts)

    @property
    def n_chars(self) -> int:
        return sum(part.n_chars for part in self.parts)

    @property
    def expired(self) -> bool:
        return expired(self.expires_at)

    def as_dict(self) -> dict:
        return {**asdict(self), "n_tokens": self.n_tokens, "n_chars": self.n_chars, "expired": self.expired}


@dataclass
class SkillExport:
    """What :meth:`~.component.Skills.export` wrote: the folder and its files, and what of its
    ``SKILL.md`` the Agent Skills reference validator refuses (``spec_problems``, empty when it
    accepts it: the files are written as imported, never rewritten to please it)."""

    name: str
    version: int
    folder: str
    files: list = field(default_factory=list)
    spec_problems: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def skill_record(memory, name: str, version: Optional[int] = None) -> SkillRecord:
    """Version ``version`` of skill ``name`` (the default one when None) in ``memory``'s store."""
    store = memory.store
    row = store.skill_version(name, version)
    record = row["record"]
    parts = []
    for part in store.skill_parts(name, row["version"]):
        try:
            block = store.get(part["block_id"])
            block_name, n_tokens, n_chars = block.name, memory.blocks.known_tokens(block), len(block.source)
        except BlockNotFoundError:
            block_name, n_tokens, n_chars = "(missing)", 0, 0
        parts.append(SkillPart(part["block_id"], block_name, part["role"], part["title"], n_tokens, n_chars))
    return SkillRecord(
        name=name, version=row["version"], default_version=store.skill_default(name),
        versions=[v["version"] for v in store.skill_versions(name)], description=row["description"],
        folder=row["folder"] or "", manifest_sha256=row["manifest_sha256"],
        model_invocable=bool(record.get("model_invocable", True)), frontmatter=record.get("frontmatter", {}),
        files=[{k: f[k] for k in ("path", "size", "sha256")} for f in store.skill_files(name, row["version"])],
        scripts=record.get("scripts", []), assets=record.get("assets", []), parts=parts,
        warnings=record.get("warnings", []), created_at=row.get("created_at") or "", keys=recorded_policy(row),
        expires_at=store.skill_expiries().get(name),
    )


def folder_of(store, name: str) -> str:
    """The folder skill ``name``'s default version was imported from, checked to be one still there."""
    folder = store.skill_version(name)["folder"]
    if not os.path.isabs(folder or ""):
        raise SkillFolderError(folder or name, f"skill {name!r} came from {folder!r}, not a folder: import it again")
    if not os.path.isdir(folder):
        raise SkillFolderError(folder or name, f"the folder of skill {name!r} is gone")
    return folder


def remove_versions(store, name: str, version: Optional[int] = None) -> list[str]:
    """Remove one version of skill ``name``, or all of them, and the blocks no version holds any
    more; the removed block ids."""
    versions = [version] if version is not None else [v["version"] for v in store.skill_versions(name)]
    if not versions:
        store.skill_default(name)  # SkillNotFoundError
    removed = []
    for number in versions:
        for block_id in store.remove_skill_version(name, number):
            try:
                removed.append(store.remove(block_id).id)
            except BlockNotFoundError:
                continue
    return removed


def skill_contents(store, name: str, version: Optional[int] = None) -> tuple[int, list[tuple[str, bytes]]]:
    """``(version, [(path, bytes), ...])``: the files of a version of skill ``name`` (the
    default by default) as imported, each path checked to be a plain one inside the skill."""
    row = store.skill_version(name, version)
    checked = []
    for item in store.skill_files(name, row["version"], with_data=True):
        parts = PurePosixPath(item["path"]).parts
        if (not parts or item["path"].startswith("/") or any(p in ("", ".", "..") for p in parts)
                or any("\\" in p or not p.isprintable() for p in parts)):
            raise SkillFolderError(item["path"], "is not a plain path inside the skill folder: nothing exported")
        checked.append((item["path"], item["data"]))
    return row["version"], checked


def export_files(name: str, number: int, files: list[tuple[str, bytes]], dest: Union[str, os.PathLike]) -> SkillExport:
    """Write version ``number`` of skill ``name`` (its ``files``) as the folder ``dest/NAME``,
    which must not exist yet."""
    target = Path(dest) / name
    if os.path.lexists(target):
        raise InputError(f"{target} exists already: export into a folder that does not hold {name!r}")
    Path(dest).mkdir(parents=True, exist_ok=True)
    target.mkdir()
    for path_text, data in files:
        path = target.joinpath(*PurePosixPath(path_text).parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    skill_md = dict(files).get("SKILL.md", b"")
    problems = spec_problems(skill_md.decode("utf-8", "replace"), name)
    return SkillExport(name, number, str(target), [path for path, _ in files], problems)


def folder_changes(store) -> list[dict]:
    """Imported skills whose folder on disk is no longer what their default version holds:
    ``{name, version, folder, change}`` with change ``changed``, ``vanished`` or ``unreadable``."""
    changes = []
    for name in store.skill_names():
        row = store.skill_version(name)
        folder = row["folder"] or ""
        entry = {"name": name, "version": row["version"], "folder": folder}
        if not os.path.isabs(folder):  # from a bundle: there is no folder to compare with
            continue
        if not os.path.isdir(folder):
            changes.append({**entry, "change": "vanished"})
            continue
        try:
            read = read_skill_folder(folder)
        except SkillFolderError as exc:
            changes.append({**entry, "change": "unreadable", "reason": exc.reason})
            continue
        if read.manifest_sha256 != row["manifest_sha256"]:
            stored = {f["path"]: f["sha256"] for f in store.skill_files(name, row["version"])}
            now = {f.path: f.sha256 for f in read.files}
            differ = sorted(p for p in set(stored) | set(now) if stored.get(p) != now.get(p))
            changes.append({**entry, "change": "changed", "files": differ})
    return changes


def stored_manifest_sha256(files: list[dict]) -> str:
    """The manifest digest of stored file rows (as :attr:`SkillFolder.manifest_sha256`)."""
    return manifest_sha256([SkillFile(f["path"], f["size"], f["sha256"]) for f in files])
