"""Reading one Agent Skills folder: a ``SKILL.md`` (YAML frontmatter and a Markdown body) and
the files beside it, as untrusted input.

:func:`read_skill_folder` walks the folder without following a link, reads at most
:data:`MAX_FILES` regular files and :data:`MAX_SKILL_BYTES` in all, and returns a
:class:`SkillFolder`: the frontmatter (:mod:`.frontmatter`), the body, the manifest of
its files (relative path, size, SHA-256) with their bytes, the text resources one level deep
(``references/*.md`` and the like), the scripts and assets (listed, never run) and the
warnings. What makes the skill unusable is a :class:`~skillgraft.errors.SkillFolderError`
naming the reason; a file that cannot be taken (a link, a binary ``.md``, a file too large) is
left out with a warning. Nothing here writes anything.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Optional

from ..errors import SkillFolderError
from .frontmatter import Frontmatter, parse_skill_md

SKILL_FILE = "SKILL.md"
MAX_SKILL_MD_BYTES = 1 << 20          # a SKILL.md of 1 MiB is some 250k tokens: far past any window
MAX_FILES = 1_000                     # files of one skill (a folder of 10,000 is refused)
MAX_SKILL_BYTES = 32 << 20            # every file of one skill together
MAX_RESOURCE_BYTES = 256 << 10        # a text resource captured as a block of its own
MAX_RESOURCES = 32                    # text resources of one skill
MAX_DEPTH = 8                         # folder levels inside a skill
SKIPPED_DIRS = frozenset({".git", "node_modules", "__pycache__", ".venv", ".hg", ".svn"})
TEXT_SUFFIXES = frozenset({".md", ".markdown", ".txt", ".rst"})
RUN_DIRS = ("scripts", "assets")      # listed in the skill's record, never run or captured
EVAL_FILES = ("eval_queries.json", "evals/evals.json")


@dataclass(frozen=True)
class SkillFile:
    """One file of a skill: its path relative to the folder (POSIX), size and SHA-256."""

    path: str
    size: int
    sha256: str

    def as_dict(self) -> dict:
        return {"path": self.path, "size": self.size, "sha256": self.sha256}


@dataclass(frozen=True)
class SkillFolder:
    """One skill folder as read: what the import stores and captures."""

    root: Path
    frontmatter: Frontmatter
    body: str
    files: tuple[SkillFile, ...]
    data: dict = field(repr=False)          # path -> bytes, for every file of the manifest
    resources: dict = field(repr=False)     # path -> text, the text resources one level deep
    warnings: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.frontmatter.name

    @property
    def description(self) -> str:
        return self.frontmatter.description

    @property
    def manifest_sha256(self) -> str:
        """One digest of the manifest: equal for equal folders, whatever order they were read in."""
        return manifest_sha256(self.files)

    def listed(self, folder: str) -> list[str]:
        """The manifest paths under ``folder`` (``scripts``, ``assets``)."""
        return [f.path for f in self.files if f.path.startswith(folder + "/")]


def manifest_sha256(files) -> str:
    lines = sorted(f"{f.path}\x00{f.size}\x00{f.sha256}" for f in files)
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()


def read_skill_folder(root, *, max_files: int = MAX_FILES, max_bytes: int = MAX_SKILL_BYTES) -> SkillFolder:
    """The skill in folder ``root``, or :class:`SkillFolderError` saying why it cannot be imported."""
    root = Path(root)
    try:
        info = os.lstat(root)
    except OSError as exc:
        raise SkillFolderError(root, f"cannot be read ({exc.strerror})") from None
    if not stat.S_ISDIR(info.st_mode):
        raise SkillFolderError(root, "is not a folder")
    warnings: list[str] = []
    data = _read_files(root, warnings, max_files, max_bytes)
    raw = data.get(SKILL_FILE)
    if raw is None:
        raise SkillFolderError(root, f"holds no readable {SKILL_FILE} (a regular file, not a link)")
    text = _utf8(raw, SKILL_FILE)
    if text is None:
        raise SkillFolderError(root / SKILL_FILE, "is not UTF-8 text without NUL bytes")
    frontmatter, body = parse_skill_md(text, root.name, warnings)
    resources = _resources(data, warnings)
    files = tuple(SkillFile(path, len(blob), hashlib.sha256(blob).hexdigest()) for path, blob in sorted(data.items()))
    return SkillFolder(root, frontmatter, body, files, data, resources, tuple(warnings))


def _read_files(root: Path, warnings: list[str], max_files: int, max_bytes: int) -> dict:
    """Every regular file under ``root`` (links, devices and skipped folders left out), read."""
    data: dict[str, bytes] = {}
    total = 0
    stack: list[tuple[Path, int]] = [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            warnings.append(f"{_rel(root, Path(folder))}/: cannot be listed ({exc.strerror}): left out")
            continue
        for entry in entries:
            path = Path(entry.path)
            rel = _rel(root, path)
            if not entry.name.isprintable() or "\\" in entry.name:
                warnings.append(f"{rel!r}: a file name with control characters or backslashes: left out")
                continue
            if entry.is_symlink():
                warnings.append(f"{rel}: a link (never followed): left out")
                continue
            if entry.is_dir(follow_symlinks=False):
                if entry.name in SKIPPED_DIRS:
                    continue
                if depth + 1 > MAX_DEPTH:
                    warnings.append(f"{rel}/: deeper than {MAX_DEPTH} levels: left out")
                    continue
                stack.append((path, depth + 1))
                continue
            if not entry.is_file(follow_symlinks=False):
                warnings.append(f"{rel}: not a regular file: left out")
                continue
            if len(data) >= max_files:
                raise SkillFolderError(root, f"holds more than {max_files} files")
            size = entry.stat(follow_symlinks=False).st_size
            if rel == SKILL_FILE and size > MAX_SKILL_MD_BYTES:
                raise SkillFolderError(root / SKILL_FILE, f"is {size} bytes (at most {MAX_SKILL_MD_BYTES})")
            total += size
            if total > max_bytes:
                raise SkillFolderError(root, f"holds more than {max_bytes} bytes of files")
            blob = _read_regular(path, size)
            if blob is None:
                warnings.append(f"{rel}: cannot be read as a regular file: left out")
                continue
            if len(blob) != size:
                raise SkillFolderError(root / rel, f"changed while it was read ({size} bytes listed): import it again")
            data[rel] = blob
    return data


def _read_regular(path: Path, size: int) -> Optional[bytes]:
    """The bytes of a regular file, opened without following a link (a race that swaps one in
    fails), at most one more than the ``size`` it was listed with (a file that grew shows it)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read(size + 1)
    finally:
        os.close(fd)


def _rel(root: Path, path: Path) -> str:
    return PurePosixPath(*path.relative_to(root).parts).as_posix()


def _utf8(blob: bytes, what: str) -> Optional[str]:
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if "\x00" in text else text


def _resources(data: dict, warnings: list[str]) -> dict:
    """The text files a body may point to: top level or one folder down, outside scripts/assets/evals."""
    resources: dict[str, str] = {}
    for path in sorted(data):
        parts = PurePosixPath(path).parts
        if path == SKILL_FILE or path in EVAL_FILES or len(parts) > 2 or PurePosixPath(path).suffix.lower() not in TEXT_SUFFIXES:
            continue
        if len(parts) == 2 and parts[0] in (*RUN_DIRS, "evals"):
            continue
        text = _utf8(data[path], path)
        if text is None:
            warnings.append(f"{path}: named as text but not UTF-8 without NUL bytes: kept as a file, not captured")
        elif len(data[path]) > MAX_RESOURCE_BYTES:
            warnings.append(f"{path}: {len(data[path])} bytes (at most {MAX_RESOURCE_BYTES} captured): kept as a file")
        elif not text.strip():
            continue
        elif len(resources) >= MAX_RESOURCES:
            warnings.append(f"{path}: more than {MAX_RESOURCES} text resources: kept as a file, not captured")
        else:
            resources[path] = text
    return resources
