"""Block files in a local folder: the default block storage (``<home>/blocks``).

A deposit writes the payload to a temp file and fsyncs it before the catalog transaction
(:meth:`FolderBlocks.stage`); inside the transaction the temp file is renamed into place
(:meth:`FolderBlocks.commit`), so a process killed at any moment leaves either no block or a
complete one, plus at most a temp or unclaimed file that ``check`` settles. Files are opened
only when they are regular files: never through a symlink, never blocking on a FIFO.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import time
import uuid
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from ..core.blocks import Block
from ..errors import BlockIntegrityError, StoreError
from ..core.sha import SHA256_HEX
from ..core.states import write_in_chunks
from .protocols import Verify

__all__ = ["FolderBlocks", "MOVED_ASIDE", "Strays", "TEMP_SUFFIX", "Verify", "fsync_dir", "not_regular", "pid_alive"]

TEMP_SUFFIX = ".part"
MOVED_ASIDE = "moved to quarantine/"

_FILE_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def not_regular(mode: int) -> str:
    return f"not a regular file ({_FILE_KINDS.get(stat.S_IFMT(mode), 'unknown type')})"


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_regular_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def write_synced(path: Path, payload: bytes) -> None:
    """Create ``path`` (it must not exist) holding ``payload``, fsynced."""
    with open(path, "xb") as handle:
        write_in_chunks(handle, payload)
        handle.flush()
        os.fsync(handle.fileno())


def read_regular(path: Path, n_bytes: int) -> tuple[Optional[bytes], Optional[str]]:
    """``(payload, None)``, or ``(None, problem)`` for a file that is missing, not a regular
    file, not ``n_bytes`` long or unreadable. Never follows a symlink, never blocks on a
    FIFO, never opens a device."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None, "file missing"
    except OSError as exc:
        return None, f"unreadable ({exc.strerror or exc})"
    if not stat.S_ISREG(mode):
        return None, not_regular(mode)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None, "file missing"
    except OSError as exc:
        return None, "not a regular file (a symbolic link)" if exc.errno == errno.ELOOP else f"unreadable ({exc.strerror or exc})"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, not_regular(info.st_mode)
        if info.st_size != n_bytes:
            return None, f"{info.st_size} bytes, expected {n_bytes}"
        with os.fdopen(os.dup(fd), "rb") as handle:
            payload = handle.read(n_bytes + 1)
    except OSError as exc:
        return None, f"unreadable ({exc.strerror or exc})"
    finally:
        os.close(fd)
    return payload, None


def prove_writable(folder: Path) -> None:
    """Create ``folder`` and write and remove a probe file in it (raises :class:`OSError`)."""
    folder.mkdir(parents=True, exist_ok=True)
    probe = folder / f".probe-{os.getpid()}-{uuid.uuid4().hex}{TEMP_SUFFIX}"
    probe.write_bytes(b"")
    probe.unlink()


def temp_file(folder: Path, block: Block) -> Path:
    """A temp file in ``folder`` named after the block and this process (see :func:`dead_writer_temp`)."""
    return folder / f".{block.sha256[:16]}.{os.getpid()}.{uuid.uuid4().hex[:8]}{TEMP_SUFFIX}"


def dead_writer_temp(path: Path) -> bool:
    """Whether ``path`` is a :func:`temp_file` whose writing process is no longer running."""
    parts = path.name.split(".")
    pid = int(parts[2]) if len(parts) > 3 and parts[2].isdigit() else -1
    return not (pid > 0 and pid_alive(pid))


@dataclass
class Strays:
    """What a storage's ``strays`` finds: each stray reported, or with ``repair`` settled at once."""

    repair: bool
    problems: list[dict] = field(default_factory=list)
    repaired: list[dict] = field(default_factory=list)

    def add(self, file: str, problem: str, settle: Callable[[], object], action: Optional[str] = None) -> None:
        """Report ``file``, or call ``settle`` and record ``action`` (else what ``settle`` returned)."""
        entry = {"block_id": None, "file": file, "problem": problem}
        if not self.repair:
            self.problems.append(entry)
            return
        done = settle()
        self.repaired.append({**entry, "action": action or done})


def block_file(folder: Path, block: Block) -> Path:
    """``<folder>/<sha256>.kv``; a row whose sha256 is not hex names no file."""
    if not SHA256_HEX.fullmatch(block.sha256):
        raise BlockIntegrityError(f"block {block.id} ({block.name}): its sha256 is not a SHA-256, so it has no file")
    return folder / block.file_name


class FolderBlocks:
    """``<folder>/<sha256>.kv`` files, with ``quarantine/`` beside them."""

    kind = "folder"

    def __init__(self, folder: Path, quarantine_dir: Path) -> None:
        self.folder = Path(folder)
        self.local_dir = self.folder  # this host's folder of block files
        self.quarantine_dir = Path(quarantine_dir)
        self.where = str(self.folder)

    def prepare(self) -> None:
        """Create the folders (those made here the owner's alone, 0700: block files hold prompts'
        token ids) and prove they can be written (raises :class:`OSError`)."""
        for folder in (self.folder, self.quarantine_dir):
            if not os.path.lexists(folder):
                folder.parent.mkdir(parents=True, exist_ok=True)
                folder.mkdir(mode=0o700, exist_ok=True)
        prove_writable(self.folder)

    def path_of(self, block: Block) -> Path:
        """``<folder>/<sha256>.kv``; a row whose sha256 is not hex names no file."""
        return block_file(self.folder, block)

    # -- writing: stage before the catalog transaction, commit inside it -------------------

    def stage(self, block: Block, payload: bytes) -> Path:
        """Write and fsync ``payload`` to a temp file named after the block and this process."""
        temp = temp_file(self.folder, block)
        try:
            write_synced(temp, payload)
        except OSError as exc:
            temp.unlink(missing_ok=True)
            raise StoreError(f"cannot write block {block.id} ({block.n_bytes} bytes): {exc.strerror or exc}") from exc
        return temp

    def commit(self, block: Block, staged: Path) -> None:
        """Rename the staged file into place (whatever odd thing sat there goes to quarantine)."""
        final = self.path_of(block)
        if os.path.lexists(final) and not is_regular_file(final):
            self.move_aside(final)
        try:
            os.replace(staged, final)
        except OSError as exc:
            raise StoreError(f"cannot write block {block.id}: {exc.strerror or exc}") from exc
        fsync_dir(self.folder)

    @staticmethod
    def release(staged: Path) -> None:
        staged.unlink(missing_ok=True)

    def has(self, block: Block) -> bool:
        return is_regular_file(self.path_of(block))

    # -- reading ---------------------------------------------------------------------------

    def read(self, block: Block, verify: Verify) -> tuple[Optional[bytes], Optional[str]]:
        """``(payload, None)`` when the file is there and ``verify`` finds no problem."""
        payload, problem = read_regular(self.path_of(block), block.n_bytes)
        if problem is None:
            problem = verify(block, payload)
        return (payload, None) if problem is None else (None, problem)

    # -- moving aside and removing ---------------------------------------------------------

    def quarantine(self, block: Block) -> Optional[Path]:
        return self.move_aside(self.path_of(block))

    def delete(self, block: Block) -> str:
        return self.discard(self.path_of(block))

    def move_aside(self, path: Path) -> Optional[Path]:
        """Move whatever is at ``path`` (a file, a link itself, a folder, a FIFO) to quarantine/."""
        if not os.path.lexists(path):
            return None
        target = self.quarantine_dir / f"{path.name}.{time.strftime('%Y%m%dT%H%M%S')}.{uuid.uuid4().hex[:6]}"
        try:
            self.quarantine_dir.mkdir(parents=True, exist_ok=True)
            os.rename(path, target)
        except OSError as exc:
            if exc.errno != errno.EXDEV or not is_regular_file(path):
                raise StoreError(f"cannot move {path.name} to quarantine/: {exc.strerror or exc}") from exc
            shutil.move(str(path), target)
        return target

    def discard(self, path: Path) -> str:
        """Delete a file or link at ``path``; anything else is moved to quarantine/."""
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return "already gone"
        except OSError as exc:
            raise StoreError(f"cannot remove {path.name}: {exc.strerror or exc}") from exc
        if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise StoreError(f"cannot remove {path.name}: {exc.strerror or exc}") from exc
            return "deleted"
        self.move_aside(path)
        return MOVED_ASIDE

    # -- check -----------------------------------------------------------------------------

    def strays(self, known: set[str], repair: bool, lock: Callable[[], AbstractContextManager]) -> tuple[list[dict], list[dict]]:
        """``(problems, repaired)``: temp files of dead writers and files no catalog row claims.

        ``lock`` is the catalog's write lock: a live writer renames and inserts under it,
        so an unclaimed file seen while holding it belongs to a writer that died.
        """
        found = Strays(repair)
        with lock():
            try:
                entries = sorted(self.folder.iterdir())
            except OSError as exc:
                return [{"block_id": None, "file": "blocks/", "problem": f"unreadable ({exc.strerror or exc})"}], []
            for path in entries:
                if path.name.endswith(TEMP_SUFFIX):
                    if dead_writer_temp(path):
                        found.add(path.name, "temp file of an interrupted write", lambda: self.discard(path))
                elif path.name not in known:
                    problem = "file without a catalog row"
                    if not is_regular_file(path):
                        problem += f", {not_regular(os.lstat(path).st_mode)}"
                    found.add(path.name, problem, lambda: self.move_aside(path), MOVED_ASIDE)
        return found.problems, found.repaired
