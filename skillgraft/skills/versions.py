"""An imported skill as one thing above its blocks: records, update, remove, default version,
export and change detection. :class:`SkillVerbs` is mixed into
:class:`~skillgraft.memory.SkillMemory`, with :class:`~.importing.SkillImports`."""

from __future__ import annotations

import os
import weakref
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Optional, Sequence, Union

from ..core.chat_layout import block_size
from ..core.expiry import expired
from ..errors import BlockNotFoundError, InputError, SkillFolderError
from .cache import SkillCache
from .folder import manifest_sha256, read_skill_folder, SkillFile
from .frontmatter import spec_problems
from .importing import SkillImportReport, recorded_policy
from .plan import EARLIER_KEY_POLICY
from .warm import SkillWarmReport, WarmJob, start_warm, warm_parts


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
    """What :meth:`SkillVerbs.export_skill` wrote: the folder and its files, and what of its
    ``SKILL.md`` the Agent Skills reference validator refuses (``spec_problems``, empty when it
    accepts it: the files are written as imported, never rewritten to please it)."""

    name: str
    version: int
    folder: str
    files: list = field(default_factory=list)
    spec_problems: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


class SkillVerbs(SkillCache):
    """``skills``, ``skill``, ``update_skill``, ``remove_skill``, ``set_default_skill_version``,
    ``export_skill``, ``skill_contents``, ``skill_changes``, the warms and (:class:`SkillCache`)
    the pins of a memory."""

    def skill_names(self, *, include_expired: bool = False) -> list[str]:
        """The names of the imported skills, sorted; those past their expiry only with
        ``include_expired`` (every door lists and reads only these)."""
        hidden = set() if include_expired else self.hidden_skills()
        return [name for name in self.store.skill_names() if name not in hidden]

    def skills(self, *, include_expired: bool = False) -> list[SkillRecord]:
        """The default version of every imported skill, by name; those past their expiry only
        with ``include_expired``."""
        return [self.skill(name) for name in self.skill_names(include_expired=include_expired)]

    def skill(self, name: str, version: Optional[int] = None) -> SkillRecord:
        """Version ``version`` of skill ``name`` (the default one when None)."""
        row = self.store.skill_version(name, version)
        record = row["record"]
        parts = []
        for part in self.store.skill_parts(name, row["version"]):
            try:
                block = self.store.get(part["block_id"])
                block_name, n_tokens, n_chars = block.name, self.known_tokens(block), len(block.source)
            except BlockNotFoundError:
                block_name, n_tokens, n_chars = "(missing)", 0, 0
            parts.append(SkillPart(part["block_id"], block_name, part["role"], part["title"], n_tokens, n_chars))
        return SkillRecord(
            name=name, version=row["version"], default_version=self.store.skill_default(name),
            versions=[v["version"] for v in self.store.skill_versions(name)], description=row["description"],
            folder=row["folder"] or "", manifest_sha256=row["manifest_sha256"],
            model_invocable=bool(record.get("model_invocable", True)), frontmatter=record.get("frontmatter", {}),
            files=[{k: f[k] for k in ("path", "size", "sha256")} for f in self.store.skill_files(name, row["version"])],
            scripts=record.get("scripts", []), assets=record.get("assets", []), parts=parts,
            warnings=record.get("warnings", []), created_at=row.get("created_at") or "", keys=recorded_policy(row),
            expires_at=self.store.skill_expiries().get(name),
        )

    def known_tokens(self, block) -> Optional[int]:
        """The tokens ``block`` adds to a prompt, without loading a model: a captured block's own
        count; a text block's counted by the engine when one is loaded already, else None."""
        if not block.text_only:
            return block.n_tokens
        engine = getattr(self, "_engine", None)
        return None if engine is None else block_size(engine, block)

    def skill_of(self, block_id: str) -> Optional[str]:
        """The imported skill a block belongs to, or None."""
        return self.store.skill_of_block(block_id)

    def update_skill(self, name: str, *, progress=None) -> SkillImportReport:
        """Read skill ``name``'s folder again: a changed folder becomes a new, default version,
        under the key policy the default version was imported with."""
        folder = self.store.skill_version(name)["folder"]
        if not os.path.isabs(folder or ""):
            raise SkillFolderError(folder or name, f"skill {name!r} came from {folder!r}, not a folder: import it again")
        if not os.path.isdir(folder):
            raise SkillFolderError(folder or name, f"the folder of skill {name!r} is gone")
        report = self.import_skills([folder], progress=progress)
        return report

    def set_default_skill_version(self, name: str, version: int) -> SkillRecord:
        """Make ``version`` the one routing offers and ``skill(name)`` shows."""
        self.store.set_skill_default(name, version)
        self._sync_pins()
        return self.skill(name)

    def remove_skill(self, name: str, version: Optional[int] = None) -> list[str]:
        """Remove one version of skill ``name``, or all of them; the blocks no version holds any
        more go with it. Returns the removed block ids."""
        versions = [version] if version is not None else [v["version"] for v in self.store.skill_versions(name)]
        if not versions:
            self.store.skill_default(name)  # SkillNotFoundError
        removed = []
        for number in versions:
            for block_id in self.store.remove_skill_version(name, number):
                try:
                    removed.append(self.store.remove(block_id).id)
                except BlockNotFoundError:
                    continue
        return removed

    def export_skill(self, name: str, dest: Union[str, os.PathLike], version: Optional[int] = None) -> SkillExport:
        """Write skill ``name`` (a version, the default by default) as the folder ``dest/NAME``,
        its files byte for byte as imported. ``dest/NAME`` must not exist yet."""
        number, files = self.skill_contents(name, version)
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

    def skill_contents(self, name: str, version: Optional[int] = None) -> tuple[int, list[tuple[str, bytes]]]:
        """``(version, [(path, bytes), ...])``: the files of a version of skill ``name`` (the
        default by default) as imported, each path checked to be a plain one inside the skill."""
        row = self.store.skill_version(name, version)
        checked = []
        for item in self.store.skill_files(name, row["version"], with_data=True):
            parts = PurePosixPath(item["path"]).parts
            if (not parts or item["path"].startswith("/") or any(p in ("", ".", "..") for p in parts)
                    or any("\\" in p or not p.isprintable() for p in parts)):
                raise SkillFolderError(item["path"], "is not a plain path inside the skill folder: nothing exported")
            checked.append((item["path"], item["data"]))
        return row["version"], checked

    def warm_skills(self, names: Sequence[str], *, system: Optional[str] = None, app: Optional[str] = None,
                    progress=None) -> SkillWarmReport:
        """Capture now what the first use of each part of skills ``names`` would: its KV state
        behind the app's ``system`` prompt, or that of the stored app ``app`` (:meth:`add_app`;
        neither: at the start of the chat), kept as a prefix state. A part whose state is kept
        already is skipped, so a warm that was interrupted goes on where it stopped;
        ``progress(done, total)`` per part."""
        return warm_parts(self, names, self._warm_prefix(system, app), progress)

    def warm_skills_in_background(self, names: Sequence[str], *, system: Optional[str] = None,
                                  app: Optional[str] = None, lock=None) -> WarmJob:
        """:meth:`warm_skills` in a thread of its own: the :class:`WarmJob` tells its progress
        while it runs and stops it between two parts. Each part is warmed holding ``lock`` (the
        lock the caller's own threads hold around their calls on this memory, which is not
        thread-safe), released between parts so that chats go first. Names and prompt are
        checked before it starts."""
        job = start_warm(self, names, self._warm_prefix(system, app), lock)
        self.__dict__.setdefault("_warm_jobs", weakref.WeakSet()).add(job)
        return job

    def stop_warming(self) -> None:
        """Stop the background warms of this memory and wait for them (as :meth:`close` does)."""
        for job in list(self.__dict__.get("_warm_jobs", ())):
            job.stop()
            try:
                job.wait()
            except Exception:  # the job's own error, told to whoever waits for it
                continue

    def skill_changes(self) -> list[dict]:
        """Imported skills whose folder on disk is no longer what their default version holds:
        ``{name, version, folder, change}`` with change ``changed``, ``vanished`` or ``unreadable``."""
        changes = []
        for name in self.store.skill_names():
            row = self.store.skill_version(name)
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
                stored = {f["path"]: f["sha256"] for f in self.store.skill_files(name, row["version"])}
                now = {f.path: f.sha256 for f in read.files}
                differ = sorted(p for p in set(stored) | set(now) if stored.get(p) != now.get(p))
                changes.append({**entry, "change": "changed", "files": differ})
        return changes


def stored_manifest_sha256(files: list[dict]) -> str:
    """The manifest digest of stored file rows (as :attr:`SkillFolder.manifest_sha256`)."""
    return manifest_sha256([SkillFile(f["path"], f["size"], f["sha256"]) for f in files])
