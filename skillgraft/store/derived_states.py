"""Derived prefix states on the home's disk: a bounded, least-recently-used cache.

A derived state (:mod:`skillgraft.kv.prefixes`) is the KV state after a prefix two
requests shared: a block plus an app's system turns and tools, or an app's prefix alone. It is
content-addressed by the runtime, its reuse scope and its token ids, digest-checked like a
block, never routed to and never part of a bundle. Each is one file ``<key>.state`` in
``home/derived/``:

    b"SGDERIV1" | header length (u32 LE) | header (JSON: tokens, sha256, fingerprint, parent) | payload

**The index.** What the cache kept is recorded outside the files, in the folder's
``index.log`` (one JSON line a state: key, payload SHA-256, scope, parent block; a later line
``gone`` removes it): a state is used only when its key is its tokens' address in the recorded
scope and its payload has the recorded digest. A file the index does not name, or whose bytes
are not what it recorded (a swapped or forged file, whatever its own header claims), is refused
with a warning and deleted: a derived state is only ever a shortcut, so the prompt is then
prefilled as if it had none. Files are private to their owner (0600 in 0700 folders).

A lookup reads only a file's header (its size and shape, the runtime's fingerprint, the
digest the index recorded) and hands out a :class:`~skillgraft.core.states.FileRef`: the payload
is read where it is used (restored, cut, written for a llama-server) and its SHA-256 checked
then, so a state found but not used is never read, and one swapped since is refused there. A
file is opened without following a link and read only when it is a regular file within the
cache's size. Files are written whole (staged, then renamed); the folder is held under
``max_bytes`` (oldest use first out, the use time kept as the file's mtime, so the order
outlives the process), and the latest states this process kept are also held in memory up to
``memory_bytes``.

**Pins.** The states kept behind a *pinned* block (the blocks of a pinned skill,
:meth:`DerivedStates.pin`) are never evicted; they count against ``max_bytes`` all the same, so
the others make room for them, and a pinned state that would take the pinned ones past
``max_bytes`` is not kept. :func:`derived_usage` reads what each runtime's folder holds, by
parent, without opening a cache.
Deleting a block deletes the states kept behind it (:meth:`DerivedStates.drop_parent`,
:func:`drop_descendants`).
"""

from __future__ import annotations

import io
import json
import logging
import os
import struct
import threading
import time
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import Optional, Union

from ..core.fingerprint import RuntimeFingerprint
from ..core.states import FileRef, KVState, sha256_hex
from ..core.sha import SHA256_HEX
from ..errors import ConfigError
from ..kv.prefixes import state_key
from .derived_index import SUFFIX, IndexLog, Record, StateUse, derived_usage, entry_of, open_regular, private_folder
from .derived_index import remove_file as _unlink, write_private
from .derived_budget import DEFAULT_DERIVED_BYTES, DEFAULT_MEMORY_BYTES, BudgetMember, SharedBytes

__all__ = ["DEFAULT_DERIVED_BYTES", "DERIVED_FOLDER", "DerivedStates", "Record", "StateUse", "decode_state",
           "derived_usage", "drop_descendants", "encode_state"]

logger = logging.getLogger("skillgraft.store")

DERIVED_FOLDER = "derived"
NAMESPACES_FOLDER = "namespaces"  # a home's namespaces, each a store of its own over the home's
MAGIC = b"SGDERIV1"
MAX_HEADER_BYTES = 1 << 20
_OPEN: "weakref.WeakSet[DerivedStates]" = weakref.WeakSet()  # told when a block's states are dropped


def encode_state(state: KVState, parent: Optional[str] = None) -> bytes:
    """A derived state's file: magic, header, payload."""
    header = json.dumps({
        "tokens": list(state.tokens), "sha256": state.sha256, "parent": parent,
        "fingerprint_id": state.fingerprint.id, "fingerprint": state.fingerprint.model_dump(mode="json"),
    }).encode()
    return MAGIC + struct.pack("<I", len(header)) + header + state.payload


def decode_state(data: bytes) -> KVState:
    """The state a file holds, its header and payload checked (:class:`ValueError` otherwise)."""
    handle = io.BytesIO(data)
    header = _read_header(handle)
    payload = handle.read()
    if sha256_hex(payload) != header["sha256"]:
        raise ValueError("payload does not match its SHA-256")
    return _state_of(header, payload)


def _state_of(header: dict, ref) -> KVState:
    """The state a checked header describes, its payload where ``ref`` says."""
    fingerprint = RuntimeFingerprint.model_validate(header["fingerprint"])
    if fingerprint.id != header.get("fingerprint_id"):
        raise ValueError("its fingerprint does not match its id")
    return KVState(tuple(header["tokens"]), ref, header["sha256"], fingerprint)


def _read_header(handle) -> dict:
    if handle.read(len(MAGIC)) != MAGIC:
        raise ValueError("not a derived state")
    raw = handle.read(4)
    if len(raw) != 4:
        raise ValueError("cut short")
    (size,) = struct.unpack("<I", raw)
    if size > MAX_HEADER_BYTES:
        raise ValueError(f"header of {size} bytes")
    try:
        header = json.loads(handle.read(size))
    except RecursionError:  # a header nested past the parser's depth
        raise ValueError("header nested too deeply") from None
    tokens = header.get("tokens") if isinstance(header, dict) else None
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, int) and 0 <= t < 2**31 for t in tokens):
        raise ValueError("bad token list")
    if not isinstance(header.get("sha256"), str) or not SHA256_HEX.fullmatch(header["sha256"]):
        raise ValueError("bad digest")
    return header


class DerivedStates(BudgetMember):
    """Derived states of one runtime (``fingerprint``) in ``folder``, at most ``max_bytes`` on
    disk (a :class:`SharedBytes`: with the folders sharing it, :mod:`.derived_budget`) and
    ``memory_bytes`` in memory; those behind a block of ``pinned`` are never evicted. Thread-safe."""

    def __init__(self, folder: Union[str, Path], fingerprint: RuntimeFingerprint, *,
                 max_bytes: int = DEFAULT_DERIVED_BYTES, memory_bytes: int = DEFAULT_MEMORY_BYTES,
                 pinned: frozenset = frozenset()) -> None:
        if max_bytes < 0 or memory_bytes < 0:
            raise ConfigError(f"derived-state limits must be >= 0 bytes, got {max_bytes} and {memory_bytes}")
        self.folder = Path(folder)
        self.fingerprint = fingerprint
        self.max_bytes = max_bytes
        self.budget = max_bytes if isinstance(max_bytes, SharedBytes) else None
        self.memory_bytes = memory_bytes if self.budget is None else self.budget.memory_bytes
        self._lock = threading.Lock()
        self._memory: OrderedDict[str, KVState] = OrderedDict()
        # key -> (bytes, tokens, record), oldest use first
        self._files: OrderedDict[str, tuple[int, tuple[int, ...], Record]] = OrderedDict()
        self._index = IndexLog(self.folder)
        self._pinned = frozenset(pinned)
        self._changes = 0  # counts every change of the keys held (the prefix index follows it)
        self._scan()
        _OPEN.add(self)
        if self.budget is not None:
            self.budget.join(self)

    # -- the folder ------------------------------------------------------------------------

    def _scan(self) -> None:
        if not self.folder.is_dir():
            return
        records = self._index.read()
        found = []
        try:
            paths = list(self.folder.iterdir())
        except OSError as exc:
            logger.warning("cannot list the derived states (%s): none are used", exc)
            return
        unknown = 0
        for path in paths:
            name = path.name
            if name.startswith(".") and name.endswith(".tmp"):
                _unlink(path)  # a write cut short
                continue
            key = name[: -len(SUFFIX)]
            if not name.endswith(SUFFIX) or not SHA256_HEX.fullmatch(key) or not path.is_file() or path.is_symlink():
                continue
            record, tokens = records.get(key), self._peek_tokens(path)
            if not tokens:
                continue  # another runtime's, or not a state: left alone
            if record is None or key != state_key(self.fingerprint.id, tokens, record.scope):
                unknown += 1  # not what the index recorded: never used
                _unlink(path)
                continue
            try:
                info = path.stat(follow_symlinks=False)
            except OSError:  # gone meanwhile
                continue
            found.append((info.st_mtime, key, info.st_size, tokens, record))
        if unknown:
            logger.warning("%d derived states the index does not record were deleted", unknown)
        for _, key, size, tokens, record in sorted(found):
            self._files[key] = (size, tokens, record)
        self._changes += 1
        self._evict()
        self._compact()

    @property
    def generation(self) -> int:
        """Changes whenever the keys held change (not their use order)."""
        return self._changes

    def _peek_tokens(self, path: Path) -> tuple[int, ...]:
        """The tokens a file's header claims (none when it is not one of this runtime's)."""
        try:
            with open_regular(path) as handle:
                header = _read_header(handle)
        except (OSError, ValueError):
            return ()
        return tuple(header["tokens"]) if header.get("fingerprint_id") == self.fingerprint.id else ()

    def _evict(self) -> None:
        gone = []
        total = sum(size for size, _, _ in self._files.values())
        for key, (size, _, record) in list(self._files.items()):  # oldest use first
            if total <= self.max_bytes:
                break
            if record.parent in self._pinned:
                continue
            del self._files[key]
            total -= size
            self._changes += 1
            self._memory.pop(key, None)
            gone.append(key)
        while self._memory and sum(s.n_bytes for s in self._memory.values()) > self.memory_bytes:
            self._memory.popitem(last=False)
        self._delete(gone)

    def _delete(self, keys: list[str]) -> None:
        """Delete the files of ``keys`` (already forgotten) and record them gone."""
        if not keys:
            return
        for key in keys:
            _unlink(self.folder / f"{key}{SUFFIX}")
        try:
            self._index.append([{"key": key, "gone": True} for key in keys])
        except OSError as exc:  # their files are gone: the index names nothing to use
            logger.debug("the derived states' index was not told of %d deletions: %s", len(keys), exc)

    def _compact(self) -> None:
        """Rewrite the index when most of its lines are stale."""
        with self._lock:
            records = {key: record for key, (_, _, record) in self._files.items()}
        if self._index.lines <= 2 * len(records) + 64:
            return
        try:
            self._index.rewrite(records)
        except OSError as exc:
            logger.debug("the derived states' index was not compacted: %s", exc)

    # -- the cache -------------------------------------------------------------------------

    @property
    def n_bytes(self) -> int:
        """The bytes of the files held."""
        with self._lock:
            return sum(size for size, _, _ in self._files.values())

    def __len__(self) -> int:
        return len(self._files)

    @property
    def pinned_bytes(self) -> int:
        """The bytes of the states kept behind pinned blocks."""
        with self._lock:
            return sum(size for size, _, record in self._files.values() if record.parent in self._pinned)

    def pin(self, parents: frozenset) -> None:
        """Keep the states behind the blocks ``parents`` (and only those) whatever the LRU order;
        the others are evicted as the budget needs."""
        with self._lock:
            self._pinned = frozenset(parents)
            self._evict()

    def entries(self) -> list[tuple[str, tuple[int, ...], str]]:
        with self._lock:
            return [(key, tokens, record.scope) for key, (_, tokens, record) in self._files.items()]

    def get(self, key: str) -> Optional[KVState]:
        """The state under ``key`` (None: not held, or its header is not what the index
        recorded: then deleted). Its payload is in memory when it was kept by this process and
        still is, else a :class:`FileRef` to the file, digest-checked when it is read."""
        with self._lock:
            if key not in self._files:
                return None
            self._files.move_to_end(key)
            _, tokens, record = self._files[key]
            state = self._memory.get(key)
            if state is not None:
                self._memory.move_to_end(key)
                return state
        path = self.folder / f"{key}{SUFFIX}"
        try:
            state = self._open(path, record)
            if state.fingerprint.id == self.fingerprint.id and (state.sha256 != record.sha256 or state.tokens != tokens):
                raise ValueError("its bytes are not those the index recorded")
        except (OSError, ValueError, KeyError) as exc:
            logger.warning("derived state %s is damaged or not what the index recorded (%s): deleted, its prompt is prefilled",
                           key[:12], exc)
            self.forget([key])
            return None
        if state.fingerprint.id != self.fingerprint.id:
            logger.warning("derived state %s is of another runtime: ignored", key[:12])
            return None
        now = time.time()
        try:
            os.utime(path, (now, now), follow_symlinks=False)
        except (OSError, NotImplementedError) as exc:  # no lutimes here, or a read-only folder
            logger.debug("derived state %s: its use is ordered in memory only (%s)", key[:12], exc)
        return state

    def _open(self, path: Path, record: Record) -> KVState:
        """The state of a file, its header read and its payload referred to (checked against
        ``record``'s digest when it is read)."""
        with open_regular(path) as handle:
            header = _read_header(handle)
            offset, size = handle.tell(), os.fstat(handle.fileno()).st_size
        if size > self.max_bytes:
            raise ValueError(f"over the cache's {self.max_bytes} bytes")
        return _state_of(header, FileRef(path, offset, size - offset, record.sha256))

    def put(self, key: str, state: KVState, parent: Optional[str] = None, scope: str = "") -> None:
        self.keep_file(key, state, encode_state(state, parent), Record(state.sha256, scope, parent))

    def keep_file(self, key: str, state: KVState, data: bytes, record: Record) -> bool:
        """Keep ``data`` (``state``'s file, :func:`encode_state`) under ``key``, as the index's
        ``record`` says; False when not kept."""
        if (state.fingerprint.id != self.fingerprint.id or record.sha256 != state.sha256
                or key != state_key(self.fingerprint.id, state.tokens, record.scope)):
            raise ValueError("a derived state is stored under its own key, runtime and digest")
        if len(data) > self.max_bytes:
            return False  # larger than the whole cache: never kept
        if record.parent in self._pinned and self.pinned_bytes + len(data) > self.max_bytes:
            logger.warning("derived state %s of pinned block %s not kept: the pinned states would outgrow the "
                           "cache's %d bytes", key[:12], record.parent, self.max_bytes)
            return False
        staged = self.folder / f".{key}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            private_folder(self.folder)
            write_private(staged, data)
            self._index.append([entry_of(key, record)])
            os.replace(staged, self.folder / f"{key}{SUFFIX}")
        except OSError as exc:
            staged.unlink(missing_ok=True)
            logger.warning("derived state %s not kept: %s", key[:12], exc)
            return False
        with self._lock:
            self._files[key] = (len(data), tuple(state.tokens), record)
            self._files.move_to_end(key)
            self._changes += 1
            self._memory[key] = state
            self._evict()
        self._compact()
        if self.budget is not None:
            self.budget.settle()
        return True

    def forget(self, keys: list[str]) -> None:
        """Delete the states of ``keys``."""
        with self._lock:
            gone = [key for key in keys if self._files.pop(key, None) is not None]
            for key in gone:
                self._memory.pop(key, None)
            self._changes += 1
        self._delete(gone)

    def drop_parent(self, parent: str) -> int:
        """Delete the states kept behind block ``parent``; how many there were."""
        with self._lock:
            keys = [key for key, (_, _, record) in self._files.items() if record.parent == parent]
        self.forget(keys)
        return len(keys)

    def clear(self) -> int:
        """Delete every derived state; return how many there were."""
        with self._lock:
            keys = list(self._files)
        self.forget(keys)
        return len(keys)


def drop_descendants(root: Union[str, Path], parent: str) -> int:
    """Delete the derived states kept behind block ``parent`` in every runtime's folder under
    ``root`` (``home/derived``); how many there were."""
    root, dropped = Path(root), 0
    for states in list(_OPEN):  # those open in this process forget them (their memory too)
        if states.folder.parent == root:
            dropped += states.drop_parent(parent)
    try:
        folders = [path for path in root.iterdir() if path.is_dir() and not path.is_symlink()]
    except OSError:
        return 0
    for folder in folders:
        index = IndexLog(folder)
        keys = [key for key, record in index.read().items() if record.parent == parent]
        for key in keys:
            _unlink(folder / f"{key}{SUFFIX}")
        if keys:
            try:
                index.append([{"key": key, "gone": True} for key in keys])
            except OSError as exc:
                logger.debug("the derived states' index was not told of %d deletions: %s", len(keys), exc)
        dropped += len(keys)
    return dropped

