"""Derived prefix states every host of a shared store can restore.

A derived state (:mod:`skillgraft.kv.prefixes`) is kept on the host that captured it
(:class:`~skillgraft.store.derived_states.DerivedStates`). When the store is shared
(:attr:`~skillgraft.store.block_store.BlockStore.shared`: blocks in object storage, catalog in
PostgreSQL) it is also *published*: its file goes to the block storage as
``derived/<key>.state`` (not a block: ``check`` never counts it as a stray), a row to the
catalog's ``derived_states`` table (key, runtime, reuse scope, token ids, bytes, the payload's
SHA-256, parent block, created and last used) and the chained keys of its whole blocks to
``derived_keys`` (:mod:`skillgraft.store.derived_keys`), so the other hosts find it by key.

**Found by key.** A prompt's lookup that this host's own states do not serve to the end asks
the catalog once for the prompt's deeper block keys (:meth:`SharedDerivedStates.find`): the
states holding the deepest one found are learned (at most :data:`MAX_ROWS`, the latest found
kept) and join :meth:`~SharedDerivedStates.entries`, so a state published on another host is
found on the next request, and no host lists the rows. :meth:`~SharedDerivedStates.get` of a
state this host lacks downloads it, checks it and keeps it in the host's cache. The published
states are held under a budget shared by the hosts (the catalog setting :data:`BUDGET_SETTING`,
default :data:`DEFAULT_SHARED_DERIVED_BYTES`): whoever publishes removes the least recently used
rows and objects beyond it (their key rows go with them).

Rows and objects are input from whoever can write the store: a row is used only when its key
is a SHA-256 that its runtime, scope and token ids hash to, its token list short and
non-negative and its size within the budget, whatever key row led to it; an object is read only
when it has the row's size and used only when its payload's digest, runtime and tokens are the
row's (so whoever can write the bucket alone cannot swap a state). A damaged one is removed (row and object)
with a warning, and so is the row of a missing one. Nothing names a path from a row. When the
catalog or the bucket fails, the shared tier only logs (at most once a minute) and rests for
:data:`BACKOFF_S` seconds: the prompt is prefilled, the state kept on this host.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from pathlib import Path
from collections import OrderedDict
from typing import Optional, Protocol, Sequence

import numpy as np

from ..core.fingerprint import RuntimeFingerprint
from ..kv.prefixes import DerivedStore, state_key
from ..core.sha import SHA256_HEX
from ..core.states import KVState
from .catalog import utc_now
from .catalog_postgres import first_line
from .derived_keys import MAX_TOKENS, find_states, insert_keys, row_tokens
from .derived_states import (
    DERIVED_FOLDER, NAMESPACES_FOLDER, SUFFIX, DerivedStates, Record, decode_state, drop_descendants, encode_state,
)
from .namespace_registry import catalog_schema, namespace_blocks_url, registered
from .protocols import Catalog

__all__ = ["BUDGET_SETTING", "DEFAULT_SHARED_DERIVED_BYTES", "SharedDerivedStates", "drop_block_states", "drop_published", "open_derived_states"]

logger = logging.getLogger("skillgraft.store")

BUDGET_SETTING = "derived.shared_bytes"
DEFAULT_SHARED_DERIVED_BYTES = 8 << 30
MAX_ROWS = 512  # published rows learned by key and kept in memory, the latest found last
LOG_EVERY_S = 60.0
TOUCH_EVERY_S = 300.0  # a host using its own copy marks the published state used at most this often
BACKOFF_S = 30.0  # after a failure the shared tier rests: requests do not wait on a bucket that is down
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
    this host (its namespaces' too, for a block of their base), and published when the store is
    shared (by the base and, for a block of the base, by every namespace it records); how many
    this host held."""
    dropped = drop_descendants(store.home / DERIVED_FOLDER, block_id)
    for folder in namespace_folders(store.home):  # a base block's states its namespaces kept
        dropped += drop_descendants(folder / DERIVED_FOLDER, block_id)
    if store.shared:
        try:
            drop_published(store.catalog, store.storage, block_id)
        except Exception as exc:  # the block is gone: its states age out under the budget
            logger.warning("the shared derived states of block %s were not removed: %s", block_id, first_line(exc, 300))
        drop_namespaces_published(store, block_id)
        for shared in list(_OPEN):  # those open in this process read the rows again
            shared.reread()
    return dropped


def drop_namespaces_published(store, block_id: str) -> None:
    """Remove the states each namespace of the shared base ``store`` published behind its block
    ``block_id``, in the namespace's schema and under its prefix (nothing for a namespace's own
    store: its registry is empty); a namespace that fails is logged and passed."""
    if getattr(store.catalog, "dialect", None) != "postgresql" or getattr(store.catalog, "schema", None) is not None:
        return
    from .backends import open_block_storage

    try:
        names = registered(store.catalog)
    except Exception as exc:
        logger.warning("the namespaces' derived states of block %s were not removed: %s", block_id, first_line(exc, 300))
        return
    for name in names:
        try:
            objects = open_block_storage(namespace_blocks_url(store.storage.url, name),
                                         store.home / NAMESPACES_FOLDER / name)
            drop_published(store.catalog, objects, block_id, namespace=name)
        except Exception as exc:
            logger.warning("namespace %s's derived states of block %s were not removed: %s", name, block_id,
                           first_line(exc, 300))


def namespace_folders(home: Path) -> list[Path]:
    """The stores of the namespaces that read ``home``'s store as their base (none in a namespace's
    own home)."""
    try:
        return [path for path in (home / NAMESPACES_FOLDER).iterdir() if path.is_dir() and not path.is_symlink()]
    except OSError:
        return []


def drop_published(catalog: Catalog, objects: DerivedObjects, parent: str, namespace: Optional[str] = None) -> int:
    """Remove the published states kept behind block ``parent`` (rows, then files; their key rows
    go with their rows): those of ``catalog``, or of namespace ``namespace``'s schema in its
    database; how many."""
    table = f'"{catalog_schema(namespace)}".derived_states' if namespace is not None else "derived_states"
    keys = [row["key"] for row in catalog.query(f"SELECT key FROM {table} WHERE parent = ?", [parent])]
    if keys:
        with catalog.write() as conn:
            conn.executemany(f"DELETE FROM {table} WHERE key = ?", [[k] for k in keys])
        delete_objects(objects, keys)
    return len(keys)


class SharedDerivedStates:
    """This host's derived states (``local``) and those the hosts published in ``catalog`` and
    ``objects``, at most ``max_bytes`` published. Thread-safe; never raises on the shared tier."""

    def __init__(self, local: DerivedStates, catalog: Catalog, objects: DerivedObjects, *,
                 max_bytes: int = DEFAULT_SHARED_DERIVED_BYTES) -> None:
        self.local = local
        self.catalog = catalog
        self.objects = objects
        self.max_bytes = max_bytes
        self.fingerprint_id = local.fingerprint.id
        self._lock = threading.Lock()
        # key -> (bytes, tokens, record) of the rows learned by key, the latest found last
        self._rows: OrderedDict[str, tuple[int, tuple[int, ...], Record]] = OrderedDict()
        self._learned = 0  # counts the changes of the rows learned
        self._skipped: set[str] = set()  # missing or damaged: not tried again until found again
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

    def forget(self, keys: list[str]) -> None:
        """Delete this host's copies of ``keys`` (a published one is checked again when downloaded)."""
        self.local.forget(keys)

    def pin(self, parents: frozenset) -> None:
        """Pin on this host (:meth:`DerivedStates.pin`); the published states age out under their own budget."""
        self.local.pin(parents)

    # -- the DerivedStore surface ----------------------------------------------------------

    @property
    def generation(self) -> tuple:
        """Changes whenever this host's states, the published rows learned or those found
        unusable change."""
        return self.local.generation, self._learned, len(self._skipped), self._resting()

    def entries(self) -> list[tuple[str, tuple[int, ...], str]]:
        mine = self.local.entries()
        if self._resting():
            return mine
        held = {key for key, _, _ in mine}
        with self._lock:
            rows = list(self._rows.items())
        return mine + [(key, tokens, record.scope) for key, (_, tokens, record) in rows
                       if key not in held and key not in self._skipped]

    def find(self, keys: Sequence[bytes]) -> bool:
        """Learn the published states that hold the deepest of ``keys`` (a prompt's chain keys,
        deepest last) any state holds: one catalog query. Whether any was new here (then
        :attr:`generation` changed and :meth:`entries` lists them)."""
        if not keys or self._resting():
            return False
        try:
            rows = find_states(self.catalog, self.fingerprint_id, keys)
        except Exception as exc:  # the catalog is down: prefill
            self._trouble("look up the shared derived states", exc)
            return False
        learned = False
        for row in rows:
            record = Record.parse(row) if self._plausible(row) else None
            tokens = row_tokens(row.get("tokens"), row.get("n_tokens")) if record is not None else None
            if tokens is None or row["key"] != state_key(self.fingerprint_id, tokens, record.scope):
                continue  # not what its key says: never used
            key, entry = row["key"], (row["n_bytes"], tokens, record)
            with self._lock:
                if self._rows.get(key) != entry or key in self._skipped:
                    learned = True
                    self._skipped.discard(key)  # published again since it was found unusable
                self._rows[key] = entry
                self._rows.move_to_end(key)
                while len(self._rows) > MAX_ROWS:
                    self._rows.popitem(last=False)
                    learned = True
        if learned:
            self._learned += 1
        return learned

    def get(self, key: str) -> Optional[KVState]:
        state = self.local.get(key)
        row = self._rows.get(key)
        since = time.monotonic() - self._touched.get(key, float("-inf"))
        published = row is not None or key in self._touched  # found by key, or published or used from here
        if state is not None and published and since > TOUCH_EVERY_S and not self._resting():
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
        """Forget the published rows learned (some were removed): they are found again by key."""
        with self._lock:
            self._rows.clear()
            self._learned += 1

    # -- the shared tier -------------------------------------------------------------------

    def _plausible(self, row: dict) -> bool:
        key, n_bytes, n_tokens = row.get("key"), row.get("n_bytes"), row.get("n_tokens")
        return (isinstance(key, str) and SHA256_HEX.fullmatch(key) is not None
                and isinstance(n_bytes, int) and 0 < n_bytes <= min(self.max_bytes, self.local.max_bytes)
                and isinstance(n_tokens, int) and 0 < n_tokens <= MAX_TOKENS)

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
            insert_keys(conn, key, self.fingerprint_id, record.scope, state.tokens)
            over = self._over_budget(conn)
            conn.executemany("DELETE FROM derived_states WHERE key = ?", [[k] for k in over])  # their keys go too
        self._touched[key] = time.monotonic()
        self._delete_objects(over)

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
