"""In-memory storage for fast tests: a catalog and block storage that touch no file.

:class:`MemoryCatalog` is a :class:`~skillgraft.store.protocols.Catalog` in SQLite's
in-memory database (the catalog speaks SQL, so its fake runs the same migrations, statements
and version triggers), gone when closed. :class:`MemoryBlocks` is a
:class:`~skillgraft.store.protocols.BlockStorage` over a dict whose payloads a test may
damage. Both plug into a store::

    store = BlockStore(home, catalog=MemoryCatalog(), blocks=MemoryBlocks())
"""

from __future__ import annotations

import errno
from contextlib import AbstractContextManager
from itertools import count
from pathlib import Path
from typing import Callable, Optional, Union

from ..core.blocks import Block
from ..store.block_folder import MOVED_ASIDE, Strays, block_file
from ..store.catalog import SqliteCatalog
from ..store.protocols import Verify

__all__ = ["MemoryBlocks", "MemoryCatalog"]

QUARANTINE = "quarantine/"


class MemoryCatalog(SqliteCatalog):
    """A catalog in memory: every migration applied, one connection, nothing on disk."""

    def __init__(self) -> None:
        super().__init__(Path(":memory:"))
        self.where = "memory"


class MemoryBlocks:
    """Block payloads in :attr:`payloads` (file name → bytes); quarantined ones in :attr:`quarantined`.

    ``local_dir`` names a folder where nothing is ever written (what :meth:`path_of` answers
    is where a folder store would keep a block); ``writable=False`` makes :meth:`prepare`
    fail as a read-only folder does.
    """

    kind = "memory"

    def __init__(self, local_dir: Union[str, Path] = "memory-blocks", *, writable: bool = True) -> None:
        self.where = "memory"
        self.local_dir = Path(local_dir)
        self.writable = writable
        self.payloads: dict[str, bytes] = {}
        self.quarantined: dict[str, bytes] = {}
        self._staged: dict[int, tuple[str, bytes]] = {}
        self._handles = count(1)

    def prepare(self) -> None:
        if not self.writable:
            raise PermissionError(errno.EACCES, "the in-memory block storage is read-only")

    def path_of(self, block: Block) -> Path:
        return block_file(self.local_dir, block)

    def _name(self, block: Block) -> str:
        return self.path_of(block).name

    def stage(self, block: Block, payload: bytes) -> int:
        handle = next(self._handles)
        self._staged[handle] = (self._name(block), bytes(payload))
        return handle

    def commit(self, block: Block, staged: int) -> None:
        name, payload = self._staged.pop(staged)
        self.payloads[name] = payload

    def release(self, staged: int) -> None:
        self._staged.pop(staged, None)

    def has(self, block: Block) -> bool:
        return self._name(block) in self.payloads

    def read(self, block: Block, verify: Verify) -> tuple[Optional[bytes], Optional[str]]:
        payload = self.payloads.get(self._name(block))
        if payload is None:
            return None, "file missing"
        if len(payload) != block.n_bytes:
            return None, f"{len(payload)} bytes, expected {block.n_bytes}"
        problem = verify(block, payload)
        return (payload, None) if problem is None else (None, problem)

    def quarantine(self, block: Block) -> Optional[str]:
        return self._move_aside(self._name(block))

    def _move_aside(self, name: str) -> Optional[str]:
        payload = self.payloads.pop(name, None)
        if payload is None:
            return None
        target = f"{QUARANTINE}{name}.{len(self.quarantined)}"
        self.quarantined[target] = payload
        return target

    def delete(self, block: Block) -> str:
        return "deleted" if self.payloads.pop(self._name(block), None) is not None else "already gone"

    def strays(
        self, known: set[str], repair: bool, lock: Callable[[], AbstractContextManager]
    ) -> tuple[list[dict], list[dict]]:
        """Payloads no catalog row claims (a write in memory is never left half done)."""
        found = Strays(repair)
        with lock():
            for name in sorted(set(self.payloads) - known):
                found.add(name, "file without a catalog row", lambda: self._move_aside(name), MOVED_ASIDE)
        return found.problems, found.repaired
