"""Finding Agent Skills folders under the paths a user names, as the client guide scans.

A path holding a ``SKILL.md`` is one skill; any other folder is a root searched for
sub-folders holding one, breadth first, at most :data:`MAX_SCAN_DEPTH` levels down and
:data:`MAX_SCAN_DIRS` folders in all, never into ``.git``, ``node_modules`` and the like, never
through a link, never into a skill folder (its sub-folders are its resources).
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from .folder import SKILL_FILE, SKIPPED_DIRS

MAX_SCAN_DEPTH = 6
MAX_SCAN_DIRS = 2_000


@dataclass
class ScanResult:
    """The skill folders found, in the order found, and what stopped or limited the scan."""

    folders: list = field(default_factory=list)
    notes: list = field(default_factory=list)


def has_skill_file(folder: Path) -> bool:
    return os.path.lexists(folder / SKILL_FILE)


def scan_for_skills(paths, *, max_depth: int = MAX_SCAN_DEPTH, max_dirs: int = MAX_SCAN_DIRS) -> ScanResult:
    """The skill folders under ``paths`` (each a skill folder or a root of them)."""
    result = ScanResult()
    seen: set[str] = set()
    for given in paths:
        path = Path(given).expanduser()
        if not path.is_dir():
            result.notes.append(f"{given}: not a folder")
            continue
        if has_skill_file(path):
            _found(result, seen, path)
            continue
        before = len(result.folders)
        _walk(path, result, seen, max_depth, max_dirs)
        if len(result.folders) == before:
            result.notes.append(f"{given}: no folder holding a {SKILL_FILE} found")
    return result


def _found(result: ScanResult, seen: set[str], path: Path) -> None:
    key = os.path.realpath(path)
    if key not in seen:
        seen.add(key)
        result.folders.append(path)


def _walk(root: Path, result: ScanResult, seen: set[str], max_depth: int, max_dirs: int) -> None:
    queue = deque([(root, 0)])
    visited = 0
    while queue:
        folder, depth = queue.popleft()
        visited += 1
        if visited > max_dirs:
            result.notes.append(f"{root}: stopped after {max_dirs} folders")
            return
        try:
            entries = sorted((e for e in os.scandir(folder) if e.is_dir(follow_symlinks=False)), key=lambda e: e.name)
        except OSError as exc:
            result.notes.append(f"{folder}: cannot be listed ({exc.strerror})")
            continue
        for entry in entries:
            if entry.name in SKIPPED_DIRS:
                continue
            child = Path(entry.path)
            if has_skill_file(child):
                _found(result, seen, child)
            elif depth + 1 < max_depth:
                queue.append((child, depth + 1))
            else:
                result.notes.append(f"{child}: deeper than {max_depth} levels: not searched")
