"""Where a started llama-server's private folder lives: in memory when the machine has room.

The folder is the server's ``--slot-save-path``: every restore of a state writes its slot file
there and every save of a slot is read back from there, so on a disk each is a write of the whole
state (tens of MB for a prompt of 2k tokens) on an answer's path. In a memory file system
(``/dev/shm`` on Linux) that write is a copy in memory, as llama-server's own host-memory prompt
cache (``--cache-ram``) keeps its prompts. Memory is used when it has room for the slot-file
budget twice over (a save's file beside a full budget), else the system's temporary folder;
``SKILLGRAFT_SLOT_FILES=disk`` keeps the folder on disk whatever the room.

A folder is private (0700) and named after its process; folders of processes that are gone (a
gateway killed without closing) are removed the next time a folder is made in memory, since
memory that a dead process's files hold is not given back otherwise.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional

from ..errors import ConfigError
from ..store.block_folder import pid_alive

__all__ = ["MEMORY_FOLDER", "in_memory_folder", "make_private_folder", "memory_root"]

MEMORY_FOLDER = Path("/dev/shm")
PREFIX = "skillgraft-server-"
SETTING = "SKILLGRAFT_SLOT_FILES"


def memory_root(budget_bytes: int, root: Optional[Path] = None) -> Optional[Path]:
    """``root`` when it is a writable memory folder with room for ``budget_bytes`` twice over
    and the environment does not ask for the disk; else None."""
    choice = (os.environ.get(SETTING) or "auto").strip().lower()
    if choice not in ("auto", "memory", "disk"):
        raise ConfigError(f"{SETTING} is auto, memory or disk, got {choice!r}")
    if choice == "disk":
        return None
    root = MEMORY_FOLDER if root is None else Path(root)
    try:
        usage = os.statvfs(root)
    except OSError:
        return None
    if not os.access(root, os.W_OK | os.X_OK) or usage.f_bavail * usage.f_frsize < 2 * max(budget_bytes, 0):
        return None
    return root


def make_private_folder(budget_bytes: int) -> Path:
    """A new private folder for one server's files, in memory when :func:`memory_root` allows."""
    root = memory_root(budget_bytes)
    if root is not None:
        sweep_dead(root)
        try:
            return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=root))
        except OSError:
            pass  # full or refused since: the disk
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))


def in_memory_folder(folder: Path) -> bool:
    """Whether ``folder`` was made in the memory folder."""
    return Path(folder).parent == MEMORY_FOLDER


def sweep_dead(root: Path) -> int:
    """Remove this user's folders in ``root`` whose process is gone; how many."""
    removed = 0
    try:
        entries = list(os.scandir(root))
    except OSError:
        return 0
    for entry in entries:
        pid = _owner_pid(entry.name)
        if pid is None or pid == os.getpid() or pid_alive(pid):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
        except OSError:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed += 1
    return removed


def _owner_pid(name: str) -> Optional[int]:
    if not name.startswith(PREFIX):
        return None
    digits = name[len(PREFIX):].split("-", 1)[0]
    return int(digits) if digits.isdigit() and len(digits) < 10 else None
