"""Derived prefix states every host of a shared store can restore.

A derived state (:mod:`skillgraft.kv.prefixes`) is kept on the host that captured it
(:class:`~skillgraft.store.derived_states.DerivedStates`). When the store is shared
(:attr:`~skillgraft.store.block_store.BlockStore.shared`: blocks in object storage, catalog in
PostgreSQL) it is also *published*: its file goes to the block storage as
``derived/<key>.state`` (not a block: ``check`` never counts it as a stray) and a row to the
catalog's ``derived_states`` table (key, runtime, reuse scope, token ids, bytes, the payload's
SHA-256, parent block, created and last used), so the other hosts learn of it without listing
the bucket.

:meth:`SharedDerivedStates.entries` adds the rows of this runtime to the host's own states
(read again at most every :data:`REFRESH_S` seconds: a lookup per request costs no catalog
round trip); :meth:`~SharedDerivedStates.get` of a state this host lacks downloads it, checks it
and keeps it in the host's cache. The published states are held under a budget shared by the
hosts (the catalog setting :data:`BUDGET_SETTING`, default :data:`DEFAULT_SHARED_DERIVED_BYTES`):
whoever publishes removes the least recently used rows and objects beyond it.

Rows and objects are input from whoever can write the store: a row is used only when its key
is a SHA-256 that its runtime, scope and token ids hash to, its token list short and
non-negative and its size within the budget; an object is read only when it has the row's size
and used only when its payload's digest, runtime and tokens are the row's (so whoever can write
the bucket alone cannot swap a state). A damaged one is removed (row and object)
with a warning, and so is the row of a missing one. Nothing names a path from a row. When the
catalog or the bucket fails, the shared tier only logs (at most once a minute) and rests for
:data:`BACKOFF_S` seconds: the prompt is prefilled, the state kept on this host.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from typing import Optional, Protocol

import numpy as np

from ..core.fingerprint import RuntimeFingerprint
from ..kv.prefixes import DerivedStore, state_key
from ..core.sha import SHA256_HEX
from ..core.states import KVState
from .catalog import utc_now
from .catalog_postgres import first_line
from .derived_states import DERIVED_FOLDER, SUFFIX, DerivedStates, Record, decode_state, drop_descendants, encode_state
from .protocols import Catalog

__all__ = ["BUDGET_SETTING", "DEFAULT_SHARED_DERIVED_BYTES", "SharedDerivedStates", "drop_block_states", "drop_published", "open_derived_states"]

logger = logging.getLogger("skillgraft.store")

BUDGET_SETTING = "derived.shared_bytes"
DEFAULT_SHARED_DERIVED_BYTES = 8 << 30
REFRESH_S = 5.0
MAX_ROWS = 512  # rows of one runtime read, most recently used first
MAX_TOKENS = 1 << 17
LOG_EVERY_S = 60.0
TOUCH_EVERY_S = 300.0  # a host using its own copy marks the published state used at most this often
BACKOFF_S = 30.0  # after a failure the shared tier rests: requests do not wait on a bucket that is down
_NEW_ROWS = 64  # rows whose token ids are read in one statement
_OPEN: "weakref.WeakSet[SharedDerivedStates]" = weakref.WeakSet()


class DerivedObjects(Protocol):
    """Where published files lie (:class:`~skillgraft.store.block_objects.ObjectBlocks`)."""

    def put_derived(self, name: str, data: bytes) -> None: ...

    def get_derived(self, name: str, n_bytes: int) -> Optional[bytes]: ...

    def delete_derived(self, name: str) -> None: ...


def open_derived_states(store, fingerprint: RuntimeFingerprint, folder, *, max_bytes: int) -> DerivedStore:
    """The derived states of ``fingerprint`` for ``store`` (a BlockStore): on this host's disk
    in ``folder`` (those behind the blocks of pinned skills never evicted there), published too
    when the store is shared."""
    local = DerivedStates(folder, fingerprint, max_bytes=max_bytes, pinned=store.pinned_blocks())
    if not store.shared:
        return local
    try:
        budget = int(store.setting(BUDGET_SETTING) or DEFAULT_SHARED_DERIVED_BYTES)
    except Exception:  # a malformed setting, or the catalog down: the default, never a failed answer
        budget = DEFAULT_SHARED_DERIVED_BYTES
    return SharedDerivedStates(local, store.catalog, store.storage, max_bytes=max(budget, 0))


def object_name(key: str) -> str:
    return f"{key}{SUFFIX}"


def delete_objects(objects: DerivedObjects, keys: list) -> None:
    """Delete the published files of ``keys`` (a path only from a checked key)."""
    for key in keys:
        if isinstance(key, str) and SHA256_HEX.fullmatch(key):
            objects.delete_derived(object_name(key))


def drop_block_states(store, block_id: str) -> int:
    """Delete the derived states kept behind block ``block_id`` of ``store`` (a BlockStore): on
    this host, and published when the store is shared; how many this host held."""
    dropped = drop_descendants(store.home / DERIVED_FOLDER, block_id)
    if store.shared:
        try:
            drop_published(store.catalog, store.storage, block_id)
        except Exception as exc:  # the block is gone: its states age out under the budget
            logger.warning("the shared derived states of block %s were not removed: %s", block_id, first_line(exc, 300))
        for shared in list(_OPEN):  # those open in this process read the rows again
            shared.reread()
    return dropped


def drop_published(catalog: Catalog, objects: DerivedObjects, parent: str) -> int:
    """Remove the published states kept behind block ``parent`` (rows, then files); how many."""
    keys = [row["key"] for row in catalog.query("SELECT key FROM derived_states WHERE parent = ?", [parent])]
    if keys:
        with catalog.write() as conn:
            conn.executemany("DELETE FROM derived_states WHERE key = ?", [[k] for k in keys])
        delete_objects(objects, keys)
    return len(keys)


class SharedDerivedStates:
    """This host's derived states (``local``) and those the hosts published in ``catalog`` and
    ``objects``, at most ``max_bytes`` published. Thread-safe; never raises on the shared tier."""

    def __init__(self, local: DerivedStates, catalog: Catalog, objects: DerivedObjects, *,
                 max_bytes: int = DEFAULT_SHARED_DERIVED_BYTES, refresh_s: float = REFRESH_S) -> None:
        self.local = local
        self.catalog = catalog
        self.objects = objects
        self.max_bytes = max_bytes
        self.refresh_s = refresh_s
        self.fingerprint_id = local.fingerprint.id
        self._lock = threading.Lock()
        self._rows: dict[str, tuple[int, tuple[int, ...], Record]] = {}  # key -> (bytes, tokens, record), most recent first
        self._rows_read = 0  # counts the reads of the rows that changed them
        self._read_at = float("-inf")
        self._skipped: set[str] = set()  # missing or damaged: not tried again until the rows are read again
        self._logged_at = float("-inf")
        self._down_until = float("-inf")
        self._touched: dict[str, float] = {}  # key -> when this process last marked it used
        _OPEN.add(self)

    def __len__(self) -> int:
        return len(self.local)

    @property
    def n_bytes(self) -> int:
        return self.local.n_bytes

    def clear(self) -> int:
        """Delete this host's derived states (the published ones age out under the budget)."""
        return self.local.clear()

    def pin(self, parents: frozenset) -> None:
        """Pin on this host (:meth:`DerivedStates.pin`); the published states age out under their own budget."""
        self.local.pin(parents)

    # -- the DerivedStore surface ----------------------------------------------------------

    @property
    def generation(self) -> tuple:
        """Changes whenever this host's states, the published rows (read again once
        :attr:`refresh_s` has passed) or the rows found unusable change."""
        if not self._resting():
            self._published()
        return self.local.generation, self._rows_read, len(self._skipped), self._resting()

    def entries(self) -> list[tuple[str, tuple[int, ...], str]]:
        mine = self.local.entries()
        if self._resting():
            return mine
        held = {key for key, _, _ in mine}
        rows = self._published()
        return mine + [(key, tokens, record.scope) for key, (_, tokens, record) in rows.items()
                       if key not in held and key not in self._skipped]

    def get(self, key: str) -> Optional[KVState]:
        state = self.local.get(key)
        row = self._rows.get(key)
        since = time.monotonic() - self._touched.get(key, float("-inf"))
        if state is not None and row is not None and since > TOUCH_EVERY_S and not self._resting():
            self._touch(key)  # its use on this host counts for the shared budget's order too
        if state is not None or row is None or key in self._skipped or self._resting():
            return state
        n_bytes, tokens, record = row
        try:
            data = self.objects.get_derived(object_name(key), n_bytes)
        except Exception as exc:  # the bucket is down: prefill
            self._trouble("read a shared derived state", exc)
            return None
        if data is None:
            logger.warning("shared derived state %s is missing or of another size: its row is removed", key[:12])
            self._skipped.add(key)
            self._remove([key])
            return None
        try:
            state = decode_state(data)
            if state.fingerprint.id != self.fingerprint_id or tuple(state.tokens) != tokens:
                raise ValueError("another runtime's state or other tokens than its row's")
            if state.sha256 != record.sha256:
                raise ValueError("its payload is not the one its row recorded")
        except (ValueError, KeyError, TypeError) as exc:
            logger.warning("shared derived state %s is damaged (%s): removed, its prompt is prefilled", key[:12], exc)
            self._skipped.add(key)
            self._remove([key])
            return None
        self.local.keep_file(key, state, data, record)
        self._touch(key)
        return state

    def put(self, key: str, state: KVState, parent: Optional[str] = None, scope: str = "") -> None:
        data = encode_state(state, parent)
        record = Record(state.sha256, scope, parent)
        self.local.keep_file(key, state, data, record)
        if len(data) > self.max_bytes or state.n_tokens > MAX_TOKENS or self._resting():
            return
        try:
            self._publish(key, state, data, record)
        except Exception as exc:  # the catalog or the bucket is down: kept on this host only
            self._trouble("publish a derived state", exc)

    def reread(self) -> None:
        """Read the published rows again at the next lookup (some were removed)."""
        with self._lock:
            self._read_at = float("-inf")
            self._rows = {}

    # -- the shared tier -------------------------------------------------------------------

    def _published(self) -> dict[str, tuple[int, tuple[int, ...], Record]]:
        """The usable rows of this runtime, read again once :attr:`refresh_s` has passed."""
        with self._lock:
            if time.monotonic() - self._read_at < self.refresh_s:
                return self._rows
            self._read_at = time.monotonic()  # one refresh at a time; a failed one is tried again later
        try:
            rows = self._read_rows()
        except Exception as exc:
            self._trouble("read the shared derived states", exc)
            return self._rows
        if rows != self._rows or self._skipped:
            self._rows_read += 1
        self._rows = rows
        self._skipped.clear()  # what was missing or damaged was removed: a key published again is new
        return rows

    def _read_rows(self) -> dict[str, tuple[int, tuple[int, ...], Record]]:
        listed = self.catalog.query(
            "SELECT key, n_bytes, n_tokens, scope, sha256, parent FROM derived_states WHERE fingerprint_id = ?"
            " ORDER BY last_used DESC LIMIT ?", [self.fingerprint_id, MAX_ROWS])
        known = self._rows
        found = {row["key"]: (row["n_bytes"], record) for row in listed
                 if self._plausible(row) and (record := Record.parse(row)) is not None}
        new = [key for key in found if key not in known or known[key][::2] != found[key]]
        tokens = {key: known[key][1] for key in found if key not in new}
        for start in range(0, len(new), _NEW_ROWS):
            chunk = new[start:start + _NEW_ROWS]
            marks = ", ".join("?" * len(chunk))
            for row in self.catalog.query(
                    "SELECT key, n_tokens, tokens FROM derived_states WHERE fingerprint_id = ? AND length(tokens) <= ?"
                    f" AND key IN ({marks})", [self.fingerprint_id, 4 * MAX_TOKENS, *chunk]):
                checked = self._token_list(row, found[row["key"]][1].scope)
                if checked is not None:
                    tokens[row["key"]] = checked
        return {key: (found[key][0], tokens[key], found[key][1]) for key in found if key in tokens}

    def _plausible(self, row: dict) -> bool:
        key, n_bytes, n_tokens = row.get("key"), row.get("n_bytes"), row.get("n_tokens")
        return (isinstance(key, str) and SHA256_HEX.fullmatch(key) is not None
                and isinstance(n_bytes, int) and 0 < n_bytes <= min(self.max_bytes, self.local.max_bytes)
                and isinstance(n_tokens, int) and 0 < n_tokens <= MAX_TOKENS)

    def _token_list(self, row: dict, scope: str) -> Optional[tuple[int, ...]]:
        """The row's token ids when they are its count's, non-negative, and hash to its key in ``scope``."""
        blob, n_tokens = row.get("tokens"), row.get("n_tokens")
        if not isinstance(blob, (bytes, memoryview)) or not isinstance(n_tokens, int) or len(blob) != 4 * n_tokens:
            return None
        ids = np.frombuffer(bytes(blob), dtype="<i4")
        if ids.size == 0 or (ids < 0).any():
            return None
        tokens = tuple(int(t) for t in ids)
        return tokens if row.get("key") == state_key(self.fingerprint_id, tokens, scope) else None

    def _publish(self, key: str, state: KVState, data: bytes, record: Record) -> None:
        if key in self._rows or self.catalog.query("SELECT key FROM derived_states WHERE key = ?", [key]):
            self._touch(key)  # published already, maybe by another host
            return
        self.objects.put_derived(object_name(key), data)
        now = utc_now()
        tokens = np.asarray(state.tokens, dtype="<i4").tobytes()
        with self.catalog.write() as conn:
            conn.execute(
                "INSERT INTO derived_states (key, fingerprint_id, scope, n_tokens, tokens, n_bytes, sha256, parent,"
                " created_at, last_used) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (key) DO UPDATE SET last_used = excluded.last_used",
                [key, self.fingerprint_id, record.scope, state.n_tokens, tokens, len(data), record.sha256,
                 record.parent, now, now])
            over = self._over_budget(conn)
            conn.executemany("DELETE FROM derived_states WHERE key = ?", [[k] for k in over])
        self._touched[key] = time.monotonic()
        self._delete_objects(over)
        with self._lock:
            self._read_at = float("-inf")  # read the rows again at the next lookup

    def _over_budget(self, conn) -> list:
        """The keys of the least recently used rows beyond the budget, and of rows that make no sense."""
        rows = conn.execute("SELECT key, n_bytes FROM derived_states ORDER BY last_used DESC, key").fetchall()
        total, over = 0, []
        for key, n_bytes in rows:
            if not isinstance(n_bytes, int) or n_bytes <= 0:
                over.append(key)  # a size that makes no sense counts for no other row
                continue
            total += n_bytes
            if total > self.max_bytes:
                over.append(key)
        return over

    def _remove(self, keys: list[str]) -> None:
        try:
            with self.catalog.write() as conn:
                conn.executemany("DELETE FROM derived_states WHERE key = ?", [[k] for k in keys])
            self._delete_objects(keys)
        except Exception as exc:
            self._trouble("remove a shared derived state", exc)

    def _delete_objects(self, keys: list) -> None:
        delete_objects(self.objects, keys)

    def _touch(self, key: str) -> None:
        self._touched[key] = time.monotonic()
        try:
            with self.catalog.write() as conn:
                conn.execute("UPDATE derived_states SET last_used = ? WHERE key = ?", [utc_now(), key])
        except Exception as exc:
            self._trouble("mark a shared derived state used", exc)

    def _resting(self) -> bool:
        return time.monotonic() < self._down_until

    def _trouble(self, what: str, exc: BaseException) -> None:
        now = time.monotonic()
        self._down_until = now + BACKOFF_S
        if now - self._logged_at >= LOG_EVERY_S:
            self._logged_at = now
            logger.warning("cannot %s (%s): derived states are kept on this host only for now", what, first_line(exc, 300))
