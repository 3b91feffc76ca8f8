"""The storage seams: what a :class:`~skillgraft.store.block_store.BlockStore` calls on its
catalog and on its block payload storage.

- :class:`Catalog` runs the store's statements (SQLite's dialect, ``?`` placeholders) in
  transactions: :class:`~skillgraft.store.catalog.SqliteCatalog` (a file in the home) and
  :class:`~skillgraft.store.catalog_postgres.PostgresCatalog` (shared by hosts) implement it.
- :class:`BlockStorage` keeps payload bytes named by their SHA-256: stage before the catalog
  transaction, commit inside it, read back verified. :class:`~skillgraft.store.block_folder.FolderBlocks`
  (a folder) and :class:`~skillgraft.store.block_objects.ObjectBlocks` (S3 API, ``file://``)
  implement it.

:mod:`skillgraft.testing` has an in-memory fake of each. Importing this module loads no
database driver.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Protocol, runtime_checkable

from ..core.blocks import Block

__all__ = ["BlockStorage", "Catalog", "CatalogWriter", "Verify"]

Verify = Callable[[Block, bytes], Optional[str]]
"""Why a payload read back is not the block's (size, digest), or None."""


@runtime_checkable
class CatalogWriter(Protocol):
    """What a catalog's write transaction yields: statements run inside it."""

    def execute(self, sql: str, params: Iterable = ...) -> Any:
        """Run one statement; the result has ``fetchone()`` (a row indexable by position)."""
        ...

    def executemany(self, sql: str, rows: Iterable[Iterable]) -> Any:
        ...


@runtime_checkable
class Catalog(Protocol):
    """The store's source of truth: blocks, fingerprints, routing keys, ledger, settings.

    Contracts every implementation keeps (checked by the storage contract tests):

    - opening one applies the numbered migrations (:data:`skillgraft.store.catalog.MIGRATIONS`)
      not yet applied, unless it is opened read-only;
    - ``write()`` is one transaction holding the catalog's write lock: committed when its
      block ends, rolled back (nothing of it visible) when the block raises;
    - ``version()`` changes whenever ``blocks`` or ``routing_keys`` change, whoever changes
      them, and never repeats;
    - a statement the catalog refuses raises :class:`~skillgraft.errors.StoreError` or one of
      ``errors`` (the store turns those into :class:`StoreError`).
    """

    where: str
    """The catalog as shown in messages (a URL without its password)."""
    errors: tuple[type[BaseException], ...]
    """The driver's errors a statement may raise."""

    def query(self, sql: str, params: Iterable = ()) -> list[dict]:
        """The rows of a statement, as dicts by column name."""
        ...

    def write(self, *, relaxed: bool = False) -> AbstractContextManager[CatalogWriter]:
        """A write transaction holding the catalog's write lock; ``relaxed`` for rows nothing
        else depends on (the ledger's): they need not wait for the disk nor for the lock."""
        ...

    def read(self) -> AbstractContextManager[Any]:
        """One consistent snapshot for the reads inside it."""
        ...

    def version(self) -> Optional[tuple[str, int]]:
        """``(catalog_id, counter)``, or None for a catalog older than the counter."""
        ...

    def integrity_problems(self) -> list[str]:
        """What is wrong with the catalog itself (empty when it is sound)."""
        ...

    def close(self) -> None:
        ...


@runtime_checkable
class BlockStorage(Protocol):
    """Block payloads named ``<sha256>.kv``, written crash-safely and read back verified.

    Contracts every implementation keeps (checked by the storage contract tests):

    - ``stage`` happens before the catalog transaction and ``commit`` inside it, so a writer
      killed at any moment leaves no half-written payload under a block's name; ``release``
      always follows, and cleans what ``stage`` left;
    - ``read`` returns ``(payload, None)`` only for bytes of the block's size that ``verify``
      accepts, else ``(None, problem)``: ``"file missing"``, ``"N bytes, expected M"``,
      ``"unreadable (…)"``/``"unreachable (…)"`` (storage that cannot be reached) or
      ``verify``'s own problem;
    - ``quarantine`` moves a payload aside (kept, never deleted): afterwards it reads as missing;
    - ``strays`` reports (and with ``repair`` settles) payloads no catalog row claims and
      leftovers of interrupted writes, as ``(problems, repaired)`` lists of dicts.
    """

    kind: str
    """``"folder"``, ``"object"``, …: which kind of storage."""
    where: str
    """The storage as shown in messages."""
    local_dir: Path
    """This host's folder of block files: the storage's own, or its cache of shared blocks."""

    def prepare(self) -> None:
        """Create what the storage needs and prove it can be written (raises :class:`OSError`)."""
        ...

    def path_of(self, block: Block) -> Path:
        """Where the block's payload lies, or would lie, on this host."""
        ...

    def stage(self, block: Block, payload: bytes) -> Any:
        """Write ``payload`` where no reader sees it under the block's name yet; a handle for
        :meth:`commit` and :meth:`release`."""
        ...

    def commit(self, block: Block, staged: Any) -> None:
        """Put the staged payload in place (inside the catalog's write transaction)."""
        ...

    def release(self, staged: Any) -> None:
        """Clean up after :meth:`stage`, committed or not."""
        ...

    def has(self, block: Block) -> bool:
        """Whether a payload is stored under the block's name."""
        ...

    def read(self, block: Block, verify: Verify) -> tuple[Optional[bytes], Optional[str]]:
        """``(payload, None)``, or ``(None, problem)``."""
        ...

    def quarantine(self, block: Block) -> Optional[object]:
        """Move the block's payload aside; where it went, or None when there was none."""
        ...

    def delete(self, block: Block) -> str:
        """Remove the block's payload: ``"deleted"``, ``"already gone"``, or what was done instead."""
        ...

    def strays(
        self, known: set[str], repair: bool, lock: Callable[[], AbstractContextManager]
    ) -> tuple[list[dict], list[dict]]:
        """``(problems, repaired)``: payloads whose file name is not in ``known`` and leftovers
        of interrupted writes. ``lock`` is the catalog's write lock (or its read snapshot)."""
        ...
