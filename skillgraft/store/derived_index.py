"""What the derived states' folder recorded of each state, outside the state files: the
``index.log`` (see :mod:`skillgraft.store.derived_states`), what the folders hold by parent
(:func:`derived_usage`), and the private files and folders they are written in."""

from __future__ import annotations

import json
import logging
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from ..core.sha import SHA256_HEX
from ..core.states import open_regular, write_in_chunks
from ..kv.prefixes import SCOPE_HEX

__all__ = ["INDEX_FILE", "SUFFIX", "IndexLog", "Record", "StateUse", "derived_usage", "entry_of", "open_regular",
           "private_folder", "remove_file", "write_private"]

logger = logging.getLogger("skillgraft.store")

INDEX_FILE = "index.log"
SUFFIX = ".state"  # a state's file: <key>.state
MAX_INDEX_BYTES = 64 << 20
FILE_MODE, FOLDER_MODE = 0o600, 0o700


def private_folder(folder: Path) -> None:
    """Make ``folder`` (and its parents) if missing; ``folder`` itself is then the owner's alone (0700)."""
    folder.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
    if stat.S_IMODE(folder.stat().st_mode) != FOLDER_MODE:
        folder.chmod(FOLDER_MODE)


@dataclass(frozen=True)
class Record:
    """What the index recorded of a state: its payload's digest, scope and parent block."""

    sha256: str
    scope: str = ""
    parent: Optional[str] = None

    @staticmethod
    def parse(line: dict) -> Optional["Record"]:
        sha, scope, parent = line.get("sha256"), line.get("scope", ""), line.get("parent")
        if not (isinstance(sha, str) and SHA256_HEX.fullmatch(sha)) or not isinstance(scope, str):
            return None
        if scope and (len(scope) != SCOPE_HEX or not all(c in "0123456789abcdef" for c in scope)):
            return None
        return Record(sha, scope, parent if isinstance(parent, str) else None)


class IndexLog:
    """A folder's ``index.log``: appended one JSON line a change, read whole, compacted when
    most of its lines are stale. Lines that are not well-formed are skipped."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / INDEX_FILE
        self.lines = 0

    def read(self) -> dict[str, Record]:
        records: dict[str, Record] = {}
        try:
            with open_regular(self.path) as handle:
                data = handle.read(MAX_INDEX_BYTES + 1)
        except FileNotFoundError:
            return records
        except OSError as exc:
            logger.warning("cannot read the derived states' index (%s): none are used", exc)
            return records
        if len(data) > MAX_INDEX_BYTES:
            logger.warning("the derived states' index is over %d bytes: none are used", MAX_INDEX_BYTES)
            return records
        lines = data.split(b"\n")
        self.lines = len(lines)
        for raw in lines:
            try:
                line = json.loads(raw)
            except (ValueError, RecursionError):
                continue
            key = line.get("key") if isinstance(line, dict) else None
            if not isinstance(key, str) or not SHA256_HEX.fullmatch(key):
                continue
            if line.get("gone"):
                records.pop(key, None)
                continue
            record = Record.parse(line)
            if record is not None:
                records[key] = record
        return records

    def append(self, entries: list[dict]) -> None:
        """Add ``entries`` (OSError when they cannot be)."""
        data = "".join(json.dumps(entry) + "\n" for entry in entries).encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), FILE_MODE)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        self.lines += len(entries)

    def rewrite(self, records: dict[str, Record]) -> None:
        """Hold exactly ``records`` (staged, then renamed)."""
        staged = self.path.with_name(f".{INDEX_FILE}.{os.getpid()}.{threading.get_ident()}.tmp")
        lines = [entry_of(key, record) for key, record in records.items()]
        write_private(staged, "".join(json.dumps(line) + "\n" for line in lines).encode())
        os.replace(staged, self.path)
        self.lines = len(lines)


@dataclass(frozen=True)
class StateUse:
    """One derived state a runtime's folder holds: its ``runtime`` (the folder's name), file
    ``n_bytes`` and ``parent`` block (None: an app's prefix alone)."""

    runtime: str
    key: str
    n_bytes: int
    parent: Optional[str]


def derived_usage(root: Union[str, Path]) -> list[StateUse]:
    """Every derived state the runtimes' folders under ``root`` (``home/derived``) hold, as their
    indexes record them and whose files are there; read only, no state opened."""
    root, found = Path(root), []
    try:
        folders = sorted(path for path in root.iterdir() if path.is_dir() and not path.is_symlink())
    except OSError:
        return found
    for folder in folders:
        for key, record in IndexLog(folder).read().items():
            try:
                info = (folder / f"{key}{SUFFIX}").stat(follow_symlinks=False)
            except OSError:  # gone meanwhile
                continue
            if stat.S_ISREG(info.st_mode):
                found.append(StateUse(folder.name, key, info.st_size, record.parent))
    return found


def entry_of(key: str, record: Record) -> dict:
    return {"key": key, "sha256": record.sha256, "scope": record.scope, "parent": record.parent}


def write_private(path: Path, data: bytes) -> None:
    """Write a new file only its owner can read (0600), never through a link."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), FILE_MODE)
    with os.fdopen(fd, "wb") as handle:
        write_in_chunks(handle, data)


def remove_file(path: Path) -> None:
    """Delete a file of the folder; what cannot be (a folder in its place, no permission) stays."""
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        logger.warning("cannot delete %s in the derived states: %s", path.name, exc)
