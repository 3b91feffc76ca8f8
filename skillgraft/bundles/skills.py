"""Imported Agent Skills in a bundle: their versions, manifests and files.

Export writes, per skill, its versions (manifest rows of path, size and SHA-256, the key
policy it was imported under, the default version, its expiry) into the manifest's ``skills`` list and each distinct file once as ``skills/<sha256>``;
a skill's blocks are not bundle rows. Import trusts none of it: every entry is checked (names
and paths as the folder reader allows them, counts and sizes bounded, each file's bytes hashed
against its row), each version is written into a private temp folder and imported through
``memory.skills`` (:meth:`~skillgraft.skills.component.Skills.import_folders`) under its
key policy (so every check of a folder on disk applies, every block is captured and every key embedded here: examples and near misses come
again from the version's ``eval_queries.json``), oldest version first; the bundle's default version is made the default.
A version whose manifest a stored version already has is unchanged. A skill new to the store
gets the bundle's expiry (one past hides it at once, as in the store it came from); a skill held
already keeps its own.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Optional

from ..errors import BundleError
from ..skills.folder import MAX_FILES, MAX_SKILL_BYTES
from ..skills.frontmatter import MAX_NAME_CHARS, USABLE_NAME
from ..skills.plan import EARLIER_KEY_POLICY, KEY_POLICIES, recorded_policy
from .reader import SKILL_FILE_NAME, _chunks, _expiry, _read_member

if TYPE_CHECKING:
    import tarfile

    from ..memory import SkillMemory
    from ..store.block_store import BlockStore

MAX_BUNDLE_SKILLS = 1_000
MAX_VERSIONS = 64


@dataclass(frozen=True)
class BundleSkillVersion:
    name: str
    version: int
    files: tuple  # (path, size, sha256)
    keys: Optional[str] = None  # its key policy (None: a bundle from before the policy was recorded)


def export_skills(store: "BlockStore", add) -> tuple[list[dict], set[str]]:
    """The manifest's ``skills`` entries and the ids of the skills' blocks; ``add(name, data)``
    writes one bundle entry."""
    entries, block_ids, written = [], set(), set()
    expiries = store.skill_expiries()
    for name in store.skill_names():
        versions = []
        for row in store.skill_versions(name):
            files = store.skill_files(name, row["version"], with_data=True)
            for item in files:
                if item["sha256"] not in written:
                    add(f"skills/{item['sha256']}", item["data"])
                    written.add(item["sha256"])
            versions.append({"version": row["version"], "manifest_sha256": row["manifest_sha256"],
                             "keys": recorded_policy(row),
                             "files": [{k: f[k] for k in ("path", "size", "sha256")} for f in files]})
            block_ids.update(p["block_id"] for p in store.skill_parts(name, row["version"]))
        entries.append({"name": name, "default_version": store.skill_default(name), "versions": versions,
                        "expires_at": expiries.get(name)})
    return entries, block_ids


def parse_skills(raw, members: dict) -> list[tuple[str, int, list[BundleSkillVersion], Optional[str]]]:
    """``[(name, default version, versions, expiry), ...]`` of the manifest's ``skills``, checked."""
    if not isinstance(raw, list) or len(raw) > MAX_BUNDLE_SKILLS:
        raise BundleError(f"the bundle's skills must be a list of at most {MAX_BUNDLE_SKILLS}")
    parsed, names = [], set()
    for index, entry in enumerate(raw):
        where = f"bundle skill #{index}"
        if not isinstance(entry, dict):
            raise BundleError(f"{where}: not an object")
        name = entry.get("name")
        if not isinstance(name, str) or len(name) > MAX_NAME_CHARS or not USABLE_NAME.fullmatch(name) or name in names:
            raise BundleError(f"{where}: the name {str(name)[:40]!r} is not a usable, unique skill name")
        names.add(name)
        versions = entry.get("versions")
        if not isinstance(versions, list) or not 1 <= len(versions) <= MAX_VERSIONS:
            raise BundleError(f"{where} ({name}): versions must be a list of 1 to {MAX_VERSIONS}")
        checked = [_version(name, item, members, f"{where} ({name})") for item in versions]
        numbers = [v.version for v in checked]
        default = entry.get("default_version")
        if len(set(numbers)) != len(numbers) or default not in numbers:
            raise BundleError(f"{where} ({name}): its versions repeat, or its default is not one of them")
        expires_at = _expiry(entry.get("expires_at"), f"{where} ({name})")
        parsed.append((name, default, sorted(checked, key=lambda v: v.version), expires_at))
    return parsed


def _version(name: str, item, members: dict, where: str) -> BundleSkillVersion:
    if not isinstance(item, dict) or type(item.get("version")) is not int or not 1 <= item["version"] < 1 << 31:
        raise BundleError(f"{where}: a version is not an object with a positive integer version")
    files = item.get("files")
    if not isinstance(files, list) or not 1 <= len(files) <= MAX_FILES:
        raise BundleError(f"{where} v{item['version']}: files must be a list of 1 to {MAX_FILES}")
    rows, paths, total = [], set(), 0
    for f in files:
        if not isinstance(f, dict):
            raise BundleError(f"{where}: a file entry is not an object")
        path, size, sha = f.get("path"), f.get("size"), f.get("sha256")
        if not isinstance(path, str) or not _plain(path) or path in paths:
            raise BundleError(f"{where}: the file path {str(path)[:60]!r} is not a plain, unique path inside a skill")
        if type(size) is not int or size < 0 or not isinstance(sha, str) or not SKILL_FILE_NAME.match(f"skills/{sha}"):
            raise BundleError(f"{where}: file {path!r} has no valid size and SHA-256")
        member = members.get(f"skills/{sha}")
        if member is None or member.size != size:
            raise BundleError(f"{where}: file {path!r} is missing from the bundle or has another size")
        total += size
        paths.add(path)
        rows.append((path, size, sha))
    if total > MAX_SKILL_BYTES or "SKILL.md" not in paths:
        raise BundleError(f"{where}: over {MAX_SKILL_BYTES} bytes of files, or no SKILL.md")
    keys = item.get("keys")
    if keys is not None and keys not in KEY_POLICIES:
        raise BundleError(f"{where} v{item['version']}: the key policy {str(keys)[:40]!r} is not one of {KEY_POLICIES}")
    return BundleSkillVersion(name, item["version"], tuple(rows), keys)


def _plain(path: str) -> bool:
    parts = PurePosixPath(path).parts
    return bool(parts) and not path.startswith("/") and all(
        p not in ("", ".", "..") and "\\" not in p and p.isprintable() for p in parts) and len(path) <= 1024


def check_skill_files(tar: "tarfile.TarFile", members: dict, skills) -> None:
    """Every skill file's bytes hashed against its SHA-256 (each distinct file once), before any deposit."""
    wanted = {sha: name for name, _, versions, _ in skills for v in versions for _, _, sha in v.files}
    for sha, name in wanted.items():
        digest = hashlib.sha256()
        for chunk in _chunks(tar, members[f"skills/{sha}"]):
            digest.update(chunk)
        if digest.hexdigest() != sha:
            raise BundleError(f"bundle skill {name!r}: the file skills/{sha[:12]}... does not match its SHA-256")


def import_skills_of(memory: "SkillMemory", tar: "tarfile.TarFile", members: dict, skills, origin: str, undo) -> list:
    """Import every skill version of the bundle (see the module's docstring), noting in ``undo``
    (an :class:`~skillgraft.bundles.undo.ImportUndo`) each version stored and each default
    changed; the import reports."""
    reports = []
    for name, default, versions, expires_at in skills:
        new = name not in memory.skills.names(include_expired=True)
        if not new:  # a version stored here may become its default, and replace its blocks' keys
            undo.skill_stored(memory.store, name)
        local_default = None
        for version in versions:
            with tempfile.TemporaryDirectory(prefix="skillgraft-bundle-") as temp:
                folder = Path(temp) / name
                _materialize(folder, tar, members, version)
                report = memory.skills.import_folders(folder, origin=f"{origin}#{name}@v{version.version}",
                                              keys=version.keys or EARLIER_KEY_POLICY)
            reports.append(report)
            undo.skill_versions.extend((s.name, s.version) for s in report.imported)
            mine = [s.version for s in report.imported if s.name == name] + [
                u["version"] for u in report.unchanged if u["name"] == name]
            if version.version == default and mine:
                local_default = mine[0]
        if local_default is not None:
            memory.skills.set_default(name, local_default)
        if new and expires_at is not None and name in memory.skills.names(include_expired=True):
            memory.expiry.set(name, expires_at)
    return reports


def _materialize(folder: Path, tar, members: dict, version: BundleSkillVersion) -> None:
    """The version's files, each checked against its SHA-256, in a new folder."""
    folder.mkdir()
    for path, size, sha in version.files:
        data = _read_member(tar, members[f"skills/{sha}"])
        if len(data) != size or hashlib.sha256(data).hexdigest() != sha:
            raise BundleError(f"bundle skill {version.name!r}: file {path!r} does not match its SHA-256")
        target = folder.joinpath(*PurePosixPath(path).parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
