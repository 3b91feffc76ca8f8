"""BlockStore: the catalog and the block payloads of one memory, crash-safe and verified.

Layout of a store folder (``$SKILLGRAFT_HOME``, default ``~/.skillgraft``)::

    catalog.db          SQLite (WAL): blocks, fingerprints, routing keys, ledger, settings
    blocks/<sha>.kv     raw per-sequence llama.cpp state, named by its SHA-256
    quarantine/         corrupt or unclaimed files, moved aside, never deleted
    index/              the router's FAISS cache, rebuilt from the catalog when stale

That is the default. A catalog URL (``postgresql://…``, :mod:`skillgraft.store.catalog_postgres`)
and a blocks URL (``s3://bucket/prefix`` or ``file:///shared/blocks``,
:mod:`skillgraft.store.block_objects`) move them out of the folder, which then keeps this host's
read-through cache (``cache/``) and router index: two folders configured with the same URLs
are two hosts of one memory (:mod:`skillgraft.store.backends`).

A deposit stages the payload first (a fsynced temp file, or an upload that never replaces
an object), then under the catalog's write lock puts it in place and inserts the row in one
transaction. Payloads are verified (size, and the BLAKE3 recorded at deposit or the SHA-256
for blocks stored before it was) on every read before they can reach llama.cpp; verified
payloads are kept in an LRU cache bounded in bytes.

A store folder that cannot be written (or ``read_only=True``) opens its catalog read-only:
listing, showing and routing work, writes raise :class:`StoreError`.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from .backends import catalog_url, open_block_storage, open_catalog_backend
from ..core.blocks import Block, BlockKind, block_id_for, tokens_sha256
from .catalog import utc_now
from ..errors import BlockIntegrityError, ConflictError, InputError, StoreError
from ..core.fingerprint import RuntimeFingerprint
from ..core.hashing import blake3_hex, payload_problem, reuse_freed_payload_memory
from ..core.sha import SHA256_HEX
from ..core.states import KVState, ReadOnUse
from .check import CheckReport, Recapture, check_store, row_problems
from . import derived_keys, namespace_registry  # noqa: F401  (their catalog migrations)
from .edits import CatalogEdits
from .expiry import Expiries
from .ledger import LedgerReads
from .protocols import BlockStorage, Catalog
from .reads import CatalogReads
from .routing_edits import RoutingEdits
from .skill_pins import SkillPins
from .app_prefixes import AppPrefixes
from .skill_records import SkillRecords

__all__ = ["BlockStore", "CheckReport", "LoadedState", "conflict_error", "row_problems", "DEFAULT_CACHE_BYTES"]

logger = logging.getLogger("skillgraft.store")

DEFAULT_CACHE_BYTES = 512 * 1024 * 1024


@dataclass(frozen=True)
class LoadedState:
    """A verified state and how it was obtained."""

    state: KVState
    from_cache: bool
    read_s: float


def conflict_error(stored: Block, block: Block) -> ConflictError:
    """The question of ``block`` is already stored, as ``stored``, with another answer."""
    return ConflictError(block.question or "", stored.id, stored.answer or "", block.answer or "", block.id)


class BlockStore(CatalogReads, CatalogEdits, RoutingEdits, LedgerReads, SkillRecords, SkillPins, Expiries,
                 AppPrefixes):
    """The catalog and block payloads of one store.

    ``catalog`` and ``blocks`` are URLs (default: ``$SKILLGRAFT_CATALOG`` and
    ``$SKILLGRAFT_BLOCKS``, and when those are unset the SQLite file and the ``blocks/``
    folder in ``home``), or objects implementing :class:`~skillgraft.store.protocols.Catalog`
    and :class:`~skillgraft.store.protocols.BlockStorage`. ``read_only=None`` (the default)
    opens a folder that cannot be written read-only when it already holds a catalog; ``True``
    forces read-only, ``False`` requires writing.
    """

    def __init__(
        self,
        home: Union[str, Path],
        *,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        read_only: Optional[bool] = None,
        catalog: Union[str, Catalog, None] = None,
        blocks: Union[str, BlockStorage, None] = None,
    ) -> None:
        self.home = Path(home).expanduser()
        self.quarantine_dir = self.home / "quarantine"
        self.storage = open_block_storage(blocks, self.home)
        if not read_only:
            read_only = not self._prepare_folders(catalog, required=read_only is False)
        self.read_only = read_only
        self.catalog = open_catalog_backend(catalog, self.home, read_only=read_only)
        reuse_freed_payload_memory()
        self.db = getattr(self.catalog, "db", self.catalog)
        self.cache_bytes = cache_bytes
        self._cache: OrderedDict[str, KVState] = OrderedDict()
        self._cached_bytes = 0

    def _prepare_folders(self, catalog: Union[str, Catalog, None], *, required: bool) -> bool:
        """Create the folders and prove they can be written; False when the store can only be read."""
        try:
            self.home.mkdir(mode=0o700, parents=True, exist_ok=True)  # its catalog holds texts, answers and queries
            self.storage.prepare()
            return True
        except OSError as exc:
            named = catalog is None or isinstance(catalog, str)
            local_catalog = named and catalog_url(catalog) is None and (self.home / "catalog.db").is_file()
            readable = exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS) and local_catalog
            if required or not readable:
                raise StoreError(f"cannot write to the store folder {self.home}: {exc.strerror or exc}") from exc
            return False

    def _require_writable(self, what: str) -> None:
        if self.read_only:
            raise StoreError(f"the store {self.home} is read-only: cannot {what}")

    def close(self) -> None:
        self.catalog.close()

    @property
    def shared(self) -> bool:
        """Whether other hosts may use this store: its blocks in object storage (or on a shared
        mount) and its catalog outside the home (PostgreSQL)."""
        own_catalog = getattr(self.catalog, "path", None) == self.home / "catalog.db"
        return self.storage.kind == "object" and not own_catalog

    # -- where payloads lie ---------------------------------------------------------------

    @property
    def blocks_dir(self) -> Path:
        """This host's folder of block files: the store's own, or the cache of shared blocks."""
        return self.storage.local_dir

    def path_of(self, block: Block) -> Path:
        """Where the block's payload lies on this host: ``blocks/<sha256>.kv``, or its cached copy."""
        return self.storage.path_of(block)

    # -- deposits --------------------------------------------------------------------------

    def put(
        self,
        state: KVState,
        *,
        name: str,
        kind: BlockKind,
        source: str,
        description: str = "",
        solution: Optional[dict] = None,
    ) -> tuple[Block, bool]:
        """Store ``state`` as a block; return ``(block, created)``.

        The same payload is stored once: depositing it again returns the existing block.
        A solution whose ``question_key`` is already stored returns that block when the
        answers agree and raises :class:`ConflictError` when they differ.
        """
        if not name or not name.strip():
            raise InputError("a block needs a non-empty name")
        if not state.tokens:
            raise InputError(f"block {name!r} has no tokens")
        block = Block(  # deposit checks the payload against its SHA-256
            id=block_id_for(state.sha256),
            sha256=state.sha256,
            name=name.strip(),
            kind=kind,
            description=description,
            source=source,
            tokens=state.tokens,
            tokens_sha256=tokens_sha256(state.tokens),
            n_tokens=state.n_tokens,
            n_bytes=state.n_bytes,
            fingerprint_id=state.fingerprint.id,
            created_at=utc_now(),
            **(solution or {}),
        )
        return self.deposit(block, state.payload, state.fingerprint)

    def deposit(self, block: Block, payload: bytes, fingerprint: RuntimeFingerprint) -> tuple[Block, bool]:
        """Write a block's payload and row crash-safely; return ``(block, created)``.

        The row must be consistent (id, hashes, counts, fingerprint) and the payload must
        hash to it. Under the write lock: the same block returns the stored one; a solution
        for a question already stored returns that block (same answer) or raises
        :class:`ConflictError` (another answer), so racing writers cannot both win.
        """
        self._require_writable(f"store block {block.id}")
        problems = row_problems(block)
        if len(payload) != block.n_bytes or hashlib.sha256(payload).hexdigest() != block.sha256:
            problems.append("payload does not match its size or SHA-256")
        elif block.blake3 is None:
            block = block.model_copy(update={"blake3": blake3_hex(payload)})
        elif blake3_hex(payload) != block.blake3:
            problems.append("payload does not match its BLAKE3")
        if fingerprint.id != block.fingerprint_id:
            problems.append(f"fingerprint {fingerprint.id} is not the block's {block.fingerprint_id}")
        if problems:
            raise BlockIntegrityError(f"block {block.id} ({block.name}): " + "; ".join(problems))
        staged = self.storage.stage(block, payload)
        try:
            with self.catalog.write() as conn:
                existing = self._rows("id = ?", [block.id])
                if existing and existing[0].status == "ok" and self.storage.has(block):
                    return existing[0], False
                if block.kind == "solution" and block.question_key is not None:
                    stored = self._same_question(block)
                    if stored is not None:
                        return stored, False
                clash = self._rows("name = ? AND id != ?", [block.name, block.id])
                if clash:
                    raise StoreError(f"the name {block.name!r} is taken by block {clash[0].id}: remove it first")
                self.storage.commit(block, staged)
                self._insert_fingerprint(conn, fingerprint)
                row = block.to_row()
                conn.execute(
                    f"INSERT OR REPLACE INTO blocks ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})",
                    list(row.values()),
                )
        finally:
            self.storage.release(staged)
        return block, True

    @staticmethod
    def _insert_fingerprint(conn, fingerprint: RuntimeFingerprint) -> None:
        conn.execute(
            "INSERT OR IGNORE INTO fingerprints (id, data, created_at) VALUES (?, ?, ?)",
            (fingerprint.id, fingerprint.canonical_json(), utc_now()),
        )

    def _same_question(self, block: Block) -> Optional[Block]:
        """The healthy solution already stored for ``block``'s question, if its answer agrees."""
        for stored in self._rows(
            "kind = 'solution' AND status = 'ok' AND question_key = ? AND id != ?", [block.question_key, block.id]
        ):
            if stored.answer != block.answer:
                raise conflict_error(stored, block)
            return stored
        return None

    def remove(self, ref: str) -> Block:
        """Delete a block's row and routing keys (a solution's: the experience keys it gave its
        skills too, :mod:`skillgraft.routing.experience`), and its payload unless another row shares it."""
        self._require_writable(f"remove {ref!r}")
        block = self.get(ref)
        with self.catalog.write() as conn:
            conn.execute("DELETE FROM routing_keys WHERE block_id = ?", (block.id,))
            if block.kind == "solution":  # a verified question is no evidence once its solution is gone
                conn.execute("DELETE FROM routing_keys WHERE kind = 'experience' AND created_by = ?",
                             (f"solution:{block.id}",))
            conn.execute("DELETE FROM blocks WHERE id = ?", (block.id,))
            shared = conn.execute("SELECT 1 FROM blocks WHERE sha256 = ? LIMIT 1", (block.sha256,)).fetchone()
            if not shared and not block.text_only and SHA256_HEX.fullmatch(block.sha256):
                self.storage.delete(block)
        if not shared:
            self.evict(block.sha256)
        from .shared_derived import drop_block_states

        drop_block_states(self, block.id)  # the derived states kept behind it go with it
        return block

    def restore_payload(self, block: Block, payload: bytes) -> None:
        """Put back the payload of a block (its bytes hash to its row) and mark it healthy."""
        staged = self.storage.stage(block, payload)
        try:
            with self.catalog.write() as conn:
                self.storage.commit(block, staged)
                conn.execute("UPDATE blocks SET status = 'ok' WHERE id = ?", (block.id,))
        finally:
            self.storage.release(staged)

    # -- reading payloads ------------------------------------------------------------------

    def load_state(self, block: Block) -> LoadedState:
        """The block's verified state, from the cache or from storage (size and digest checked).

        A corrupt payload, or anything but a regular file, is quarantined and raises
        :class:`BlockIntegrityError`; so does a row that is inconsistent in itself.
        Storage that cannot be reached raises :class:`StoreError` and quarantines nothing.
        """
        started = time.perf_counter()
        cached = self._usable(block)
        if cached is not None:
            return LoadedState(cached, True, time.perf_counter() - started)
        payload, problem = self.storage.read(block, self.payload_problem)
        if problem == "file missing":
            raise BlockIntegrityError(f"block {block.id} ({block.name}): its file {block.file_name} is missing; run "
                                      "`skillgraft check --repair`", **self._facts(block))
        if problem and problem.startswith(("unreadable", "unreachable")):
            raise StoreError(f"cannot read block {block.id} ({block.name}): {problem}")
        if problem:
            if self.read_only:
                raise BlockIntegrityError(f"block {block.id} ({block.name}) is corrupt ({problem})", **self._facts(block))
            self.quarantine(block, problem)
            raise BlockIntegrityError(f"block {block.id} ({block.name}) is corrupt ({problem}); moved to quarantine/",
                                      **self._facts(block))
        state = KVState(block.tokens, payload, block.sha256, self.fingerprint(block.fingerprint_id))
        self._remember(state)
        return LoadedState(state, False, time.perf_counter() - started)

    def state_of(self, block: Block) -> LoadedState:
        """As :meth:`load_state`, but a payload not in the cache is read (verified, cached, or
        quarantined) only when the state's payload is first asked for: an answer whose cells
        hold the block already reads nothing. A row that cannot be used raises here."""
        started = time.perf_counter()
        cached = self._usable(block)
        state = cached or KVState(block.tokens, ReadOnUse(block.n_bytes, lambda: self.load_state(block).state.payload),
                                  block.sha256, self.fingerprint(block.fingerprint_id))
        return LoadedState(state, cached is not None, time.perf_counter() - started)

    def _usable(self, block: Block) -> Optional[KVState]:
        """The block's cached state, or None; raise for a block whose row cannot be read from."""
        if block.text_only:
            raise InputError(f"block {block.id} ({block.name}) is a text block: it has no state to read")
        cached = self._cache.get(block.sha256)
        if cached is not None and cached.tokens == block.tokens:
            self._cache.move_to_end(block.sha256)
            return cached
        if block.status != "ok":
            raise BlockIntegrityError(
                f"block {block.id} ({block.name}) is quarantined: run `skillgraft check --repair`", **self._facts(block))
        inconsistent = row_problems(block)
        if inconsistent:
            raise BlockIntegrityError(f"block {block.id} ({block.name}) has an inconsistent catalog row: "
                                      f"{'; '.join(inconsistent)}", **self._facts(block))
        return None

    @staticmethod
    def _facts(block: Block) -> dict:
        return {"block_id": block.id, "expected_bytes": block.n_bytes, "sha256": block.sha256}

    @staticmethod
    def payload_problem(block: Block, payload: bytes) -> Optional[str]:
        """Why ``payload`` is not the block's payload (size, then its BLAKE3, or its SHA-256
        for a block stored before migration 9), or None."""
        return payload_problem(payload, block.n_bytes, block.sha256, block.blake3)

    def _remember(self, state: KVState) -> None:
        if state.n_bytes > self.cache_bytes or state.sha256 in self._cache:
            return
        self._cache[state.sha256] = state
        self._cached_bytes += state.n_bytes
        while self._cached_bytes > self.cache_bytes:
            _, evicted = self._cache.popitem(last=False)
            self._cached_bytes -= evicted.n_bytes

    def evict(self, sha256: str) -> None:
        """Drop a payload from the LRU cache (its next load reads and verifies it again)."""
        evicted = self._cache.pop(sha256, None)
        if evicted is not None:
            self._cached_bytes -= evicted.n_bytes

    def quarantine(self, block: Block, reason: str) -> Optional[object]:
        """Move a block's payload aside and mark its row: every host then skips it."""
        self._require_writable(f"quarantine block {block.id}")
        logger.warning("block %s (%s) quarantined: %s", block.id, block.name, reason)
        self.evict(block.sha256)
        moved = self.storage.quarantine(block)
        self.mark_quarantined(block)
        return moved

    def mark_quarantined(self, block: Block) -> None:
        with self.catalog.write() as conn:
            conn.execute("UPDATE blocks SET status = 'quarantined' WHERE id = ?", (block.id,))

    # -- integrity -------------------------------------------------------------------------

    def check(self, *, repair: bool = False, recapture: Optional[Recapture] = None) -> CheckReport:
        """Verify the catalog and every payload; with ``repair``, settle what is wrong
        (see :func:`skillgraft.store.check.check_store`)."""
        if repair:
            self._require_writable("repair it")
        return check_store(self, repair=repair, recapture=recapture)
