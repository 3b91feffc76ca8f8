"""Captured blocks as prefix states: the live blocks of one runtime, found by key beside the
derived states (:class:`~skillgraft.kv.prefixes.KeptBlocks`).

A captured block's state is the KV state of its token ids at position 0 under its runtime: a
prefix state like a derived one. :class:`BlockStates` presents the blocks of a memory's stores
(its own, then the base a namespace reads) to its :class:`~skillgraft.kv.prefixes.PrefixCache`,
read-only:

- **Keyed from the catalog.** A block's key is :func:`~skillgraft.kv.prefix_keys.state_key` of
  the token ids its catalog row records, in :data:`~skillgraft.kv.prefix_keys.BLOCK_SCOPE`. The
  rows (ids, digests and token ids; no texts) are read again only when a catalog's version
  changes (a deposit, a removal, a quarantine, an expiry set) or an expiry passes; no block file
  is opened until a prompt's key finds it. A row inconsistent in itself (its id, digests, counts
  or token ids) is left out, with a log line.
- **Live only.** The blocks of this runtime (a text block has no state) that are healthy (not
  quarantined), not expired and not part of an expired skill.
- **Read as routing reads them.** :meth:`BlockStates.get` first checks that the block's row still
  holds what its key was made of, then reads it with :meth:`~skillgraft.store.block_store.BlockStore.load_state`:
  size and digest checked against the catalog, a damaged file quarantined by the block store
  (with its own log line). Nothing here deletes a block or a file: a block whose state cannot
  be used is only not found by key until its catalog changes (one that cannot be reached, for
  :data:`RETRY_S`), with a log line. The derived states' eviction and budgets never see blocks.
- **Shared stores.** The catalog (SQLite or PostgreSQL) lists the blocks on every host and a
  block read through the object storage's cache is verified the same way, so a shared store's
  blocks are found by key on every host; each host keeps its own index of them in memory (the
  ``derived_keys`` table holds only the published derived states).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Optional, Sequence

from ..core.blocks import tokens_from_bytes
from ..core.expiry import Deadlines
from ..core.states import KVState
from ..errors import BlockIntegrityError, BlockNotFoundError, SkillgraftError
from ..kv.prefix_keys import BLOCK_SCOPE, state_key
from .check import identity_problems

__all__ = ["RETRY_S", "BlockStates", "row_problem"]

logger = logging.getLogger("skillgraft.store")

RETRY_S = 30.0  # a block whose storage could not be reached is tried again after this
LOG_EVERY_S = 60.0


@dataclass(frozen=True)
class _Entry:
    """A live block as its catalog row recorded it: where it is, its id, digest and tokens."""

    store: object
    block_id: str
    sha256: str
    tokens: tuple[int, ...]


def row_problem(row: dict) -> Optional[str]:
    """Why a catalog row (:meth:`~skillgraft.store.reads.CatalogReads.state_rows`) cannot key a
    block's state, or None."""
    sha, raw = row.get("sha256"), row.get("tokens")
    if not isinstance(sha, str):
        return "its SHA-256 is not text"
    if not isinstance(raw, (bytes, bytearray, memoryview)) or not len(raw) or len(raw) % 4:
        return "its token ids are not whole int32s"
    tokens = tokens_from_bytes(bytes(raw))
    problems = identity_problems(row.get("id"), sha, tokens, row.get("n_tokens"), row.get("tokens_sha256"))
    if problems:
        return problems[0]
    return "a token id is negative" if min(tokens) < 0 else None


class BlockStates:
    """The live captured blocks of runtime ``fingerprint_id`` in ``stores`` (BlockStores, the
    memory's own first), as read-only prefix states keyed in :data:`BLOCK_SCOPE`. Thread-safe;
    never raises: a catalog that cannot be read leaves the blocks last read, with a log line."""

    def __init__(self, stores: Sequence, fingerprint_id: str) -> None:
        self.stores = list(stores)
        self.fingerprint_id = fingerprint_id
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self._read_at: object = None  # (catalog versions, epoch) the entries were read at
        self._epoch = 0  # counts the expiries passed since
        self._next_expiry = math.inf  # when the next listed block (or its skill) expires, Unix seconds
        self._skipped: dict[str, float] = {}  # key -> until when (monotonic) it is not read
        self._logged_at = -math.inf

    def __len__(self) -> int:
        return len(self._entries)

    # -- the KeptBlocks surface ------------------------------------------------------------

    @property
    def generation(self) -> tuple:
        """Changes whenever a catalog's version does, and when a listed block's expiry passes."""
        versions = self._versions()
        with self._lock:
            if time.time() >= self._next_expiry:
                self._epoch += 1
                self._next_expiry = math.inf
            return versions, self._epoch

    def entries(self) -> list[tuple[str, tuple[int, ...], str]]:
        versions = self._versions()
        with self._lock:
            read_at = (versions, self._epoch)
            stale = versions is not None and read_at != self._read_at
        if stale:
            self._read(read_at)
        with self._lock:
            return [(key, entry.tokens, BLOCK_SCOPE) for key, entry in self._entries.items()]

    def get(self, key: str) -> Optional[KVState]:
        """The verified state of the block under ``key`` (None: not listed, changed in its
        catalog since, or unusable: then not read again until the catalog changes)."""
        with self._lock:
            entry = self._entries.get(key)
            waiting = time.monotonic() < self._skipped.get(key, -math.inf)
        if entry is None or waiting:
            return None
        store = entry.store
        try:
            block = store.get(entry.block_id)
            if (block.id, block.sha256, block.status, tuple(block.tokens), block.fingerprint_id) != \
                    (entry.block_id, entry.sha256, "ok", entry.tokens, self.fingerprint_id):
                return None  # changed since it was listed: the next look lists it anew
            state = store.load_state(block).state
        except BlockNotFoundError as exc:  # removed since (the next look lists it no more), or its id is ambiguous
            with self._lock:
                self._skipped[key] = math.inf
            logger.debug("block %s is not found by key: %s", entry.block_id, exc)
            return None
        except BlockIntegrityError as exc:  # damaged (quarantined by its store), missing, inconsistent
            self._skip(key, math.inf, f"block {entry.block_id} is not found by key until its catalog changes: {exc}")
            return None
        except SkillgraftError as exc:  # its storage cannot be reached: prefilled for now
            self._skip(key, time.monotonic() + RETRY_S, f"block {entry.block_id} cannot be read ({exc}): "
                                                          f"its prompts are prefilled for {RETRY_S:.0f} s")
            return None
        if (tuple(state.tokens), state.sha256, state.fingerprint.id) != (entry.tokens, entry.sha256, self.fingerprint_id):
            self._skip(key, math.inf, f"block {entry.block_id}'s state is not what its catalog row recorded")
            return None
        return state

    def refuse(self, key: str, state: KVState, reason: BaseException) -> bool:
        """``state`` was unusable where it was read: True when it is the block's under ``key``
        (not found by key again until the catalog changes; the block itself stays)."""
        with self._lock:
            entry = self._entries.get(key)
        if entry is None or entry.sha256 != state.sha256:
            return False
        self._skip(key, math.inf, f"block {entry.block_id}'s state was unusable where it was read ({reason}): kept, "
                                  "not found by key until its catalog changes")
        return True

    # -- the catalogs ----------------------------------------------------------------------

    def _skip(self, key: str, until: float, message: str) -> None:
        with self._lock:
            self._skipped[key] = until
        logger.warning("%s", message)

    def _versions(self) -> Optional[tuple]:
        """Each catalog's version, or None when one cannot be read (logged at most once a minute)."""
        try:
            return tuple(store.catalog_version() for store in self.stores)
        except SkillgraftError as exc:
            self._trouble(exc)
            return None

    def _read(self, read_at: tuple) -> None:
        """List the live blocks again (their rows only, no file)."""
        now = time.time()
        entries: dict[str, _Entry] = {}
        soonest, left_out = math.inf, []
        try:
            for store in self.stores:
                rows = [row for row in store.state_rows(self.fingerprint_id) if not _left_out(row, left_out)]
                deadlines = Deadlines({**store.skill_expiries(), **{row["id"]: row.get("expires_at") for row in rows}})
                hidden, soonest = deadlines.hidden(now), min(soonest, deadlines.next_after(now))
                skills = store.skill_routing()[0] if hidden.passed else {}
                for row in rows:
                    if hidden.hides(row["id"], skills.get(row["id"])):
                        continue
                    tokens = tokens_from_bytes(bytes(row["tokens"]))
                    entries.setdefault(state_key(self.fingerprint_id, tokens, BLOCK_SCOPE),
                                       _Entry(store, row["id"], row["sha256"], tokens))
        except (SkillgraftError, ValueError, TypeError, KeyError) as exc:
            self._trouble(exc)
            return
        if left_out:
            logger.warning("%d catalog rows of blocks are left out of the key index (%s)", len(left_out),
                           "; ".join(left_out[:3]))
        with self._lock:
            self._entries, self._skipped = entries, {}
            self._read_at = read_at
            self._next_expiry = soonest

    def _trouble(self, exc: BaseException) -> None:
        now = time.monotonic()
        if now - self._logged_at >= LOG_EVERY_S:
            self._logged_at = now
            logger.warning("the blocks cannot be listed for prefix reuse (%s): those listed before are used",
                           str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__)


def _left_out(row, left_out: list) -> bool:
    """Whether catalog ``row`` cannot be listed (why, added to ``left_out``)."""
    problem = row_problem(row)
    if problem is not None:
        left_out.append(f"{str(row.get('id'))[:40]!r}: {problem}")
    return problem is not None
