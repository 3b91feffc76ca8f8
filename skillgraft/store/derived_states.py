"""Derived prefix states on the home's disk: a bounded, least-recently-used cache.

A derived state (:mod:`skillgraft.kv.prefixes`) is the KV state after a prefix two
requests shared: a block plus an app's system turns and tools, or an app's prefix alone. It is
content-addressed by the runtime and its token ids, digest-checked like a block, never routed
to and never part of a bundle. Each is one file ``<key>.state`` in ``home/derived/``:

    b"SGDERIV1" | header length (u32 LE) | header (JSON: tokens, sha256, fingerprint, parent) | payload

Reads check the header's size and shape, the runtime's fingerprint and the payload's SHA-256;
a file is opened without following a link and read only when it is a regular file within the
cache's size; a damaged file is deleted with a warning, a foreign one ignored: a derived state is only ever a
shortcut, so the prompt is then prefilled as if it had none. Files are written whole (staged,
then renamed); the folder is held under ``max_bytes`` (oldest use first out, the use time kept
as the file's mtime, so the order outlives the process), and the latest states are also kept in
memory up to ``memory_bytes``.
"""

from __future__ import annotations

import io
import json
import logging
import os
import stat
import struct
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Optional, Union

from ..core.fingerprint import RuntimeFingerprint
from ..core.states import KVState, sha256_hex
from ..core.sha import SHA256_HEX
from ..errors import ConfigError
from ..kv.prefixes import legacy_state_key, state_key

__all__ = ["DEFAULT_DERIVED_BYTES", "DERIVED_FOLDER", "DerivedStates", "decode_state", "encode_state"]

logger = logging.getLogger("skillgraft.store")

DERIVED_FOLDER = "derived"
MAGIC = b"SGDERIV1"
SUFFIX = ".state"
MAX_HEADER_BYTES = 1 << 20
DEFAULT_DERIVED_BYTES = 2 << 30
DEFAULT_MEMORY_BYTES = 256 << 20


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
    fingerprint = RuntimeFingerprint.model_validate(header["fingerprint"])
    if fingerprint.id != header.get("fingerprint_id"):
        raise ValueError("its fingerprint does not match its id")
    return KVState(tuple(header["tokens"]), payload, header["sha256"], fingerprint)


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


class DerivedStates:
    """Derived states of one runtime (``fingerprint``) in ``folder``, at most ``max_bytes`` on
    disk and ``memory_bytes`` in memory. Thread-safe."""

    def __init__(self, folder: Union[str, Path], fingerprint: RuntimeFingerprint, *,
                 max_bytes: int = DEFAULT_DERIVED_BYTES, memory_bytes: int = DEFAULT_MEMORY_BYTES) -> None:
        if max_bytes < 0 or memory_bytes < 0:
            raise ConfigError(f"derived-state limits must be >= 0 bytes, got {max_bytes} and {memory_bytes}")
        self.folder = Path(folder)
        self.fingerprint = fingerprint
        self.max_bytes = max_bytes
        self.memory_bytes = memory_bytes
        self._lock = threading.Lock()
        self._memory: OrderedDict[str, KVState] = OrderedDict()
        self._files: OrderedDict[str, tuple[int, tuple[int, ...]]] = OrderedDict()  # key -> (bytes, tokens), oldest use first
        self._changes = 0  # counts every change of the keys held (the prefix index follows it)
        self._scan()

    # -- the folder ------------------------------------------------------------------------

    def _scan(self) -> None:
        if not self.folder.is_dir():
            return
        found = []
        try:
            paths = list(self.folder.iterdir())
        except OSError as exc:
            logger.warning("cannot list the derived states (%s): none are used", exc)
            return
        for path in paths:
            name = path.name
            if name.startswith(".") and name.endswith(".tmp"):
                _unlink(path)  # a write cut short
                continue
            key = name[: -len(SUFFIX)]
            if not name.endswith(SUFFIX) or not SHA256_HEX.fullmatch(key) or not path.is_file() or path.is_symlink():
                continue
            tokens = self._peek_tokens(path)
            if tokens and key == legacy_state_key(self.fingerprint.id, tokens):
                key, path = self._migrate(path, tokens)
            try:
                info = path.stat(follow_symlinks=False)
            except OSError:  # gone meanwhile
                continue
            if tokens:
                found.append((info.st_mtime, key, info.st_size, tokens))
        for _, key, size, tokens in sorted(found):
            self._files[key] = (size, tokens)
        self._changes += 1
        self._evict()

    def _migrate(self, path: Path, tokens: tuple[int, ...]) -> tuple[str, Path]:
        """Rename a file kept under its pre-chained-key address to its key (kept as it is when
        that fails)."""
        key = state_key(self.fingerprint.id, tokens)
        target = self.folder / f"{key}{SUFFIX}"
        try:
            os.replace(path, target)
        except OSError as exc:
            logger.debug("derived state %s keeps its old name (%s)", path.name[:12], exc)
            return path.name[: -len(SUFFIX)], path
        return key, target

    @property
    def generation(self) -> int:
        """Changes whenever the keys held change (not their use order)."""
        return self._changes

    def _peek_tokens(self, path: Path) -> tuple[int, ...]:
        """The tokens a file's header claims (none when it is not one of this runtime's)."""
        try:
            with _open_regular(path) as handle:
                header = _read_header(handle)
        except (OSError, ValueError):
            return ()
        return tuple(header["tokens"]) if header.get("fingerprint_id") == self.fingerprint.id else ()

    def _evict(self) -> None:
        while self._files and sum(size for size, _ in self._files.values()) > self.max_bytes:
            key, _ = self._files.popitem(last=False)
            self._changes += 1
            self._memory.pop(key, None)
            _unlink(self.folder / f"{key}{SUFFIX}")
        while self._memory and sum(s.n_bytes for s in self._memory.values()) > self.memory_bytes:
            self._memory.popitem(last=False)

    # -- the cache -------------------------------------------------------------------------

    @property
    def n_bytes(self) -> int:
        """The bytes of the files held."""
        with self._lock:
            return sum(size for size, _ in self._files.values())

    def __len__(self) -> int:
        return len(self._files)

    def entries(self) -> list[tuple[str, tuple[int, ...]]]:
        with self._lock:
            return [(key, tokens) for key, (_, tokens) in self._files.items()]

    def get(self, key: str) -> Optional[KVState]:
        with self._lock:
            if key not in self._files:
                return None
            self._files.move_to_end(key)
            state = self._memory.get(key)
            if state is not None:
                self._memory.move_to_end(key)
                return state
        path = self.folder / f"{key}{SUFFIX}"
        try:
            state = self._read(path)
        except (OSError, ValueError, KeyError) as exc:
            logger.warning("derived state %s is damaged (%s): deleted, its prompt is prefilled", key[:12], exc)
            with self._lock:
                self._files.pop(key, None)
                self._changes += 1
            _unlink(path)
            return None
        if state.fingerprint.id != self.fingerprint.id:
            logger.warning("derived state %s is of another runtime: ignored", key[:12])
            return None
        now = time.time()
        try:
            os.utime(path, (now, now), follow_symlinks=False)
        except (OSError, NotImplementedError) as exc:  # no lutimes here, or a read-only folder
            logger.debug("derived state %s: its use is ordered in memory only (%s)", key[:12], exc)
        with self._lock:
            self._memory[key] = state
            self._evict()
        return state

    def _read(self, path: Path) -> KVState:
        with _open_regular(path) as handle:
            data = handle.read(self.max_bytes + 1)
        if len(data) > self.max_bytes:
            raise ValueError(f"over the cache's {self.max_bytes} bytes")
        return decode_state(data)

    def put(self, key: str, state: KVState, parent: Optional[str] = None) -> None:
        self.keep_file(key, state, encode_state(state, parent))

    def keep_file(self, key: str, state: KVState, data: bytes) -> bool:
        """Keep ``data`` (``state``'s file, :func:`encode_state`) under ``key``; False when not kept."""
        if not SHA256_HEX.fullmatch(key) or state.fingerprint.id != self.fingerprint.id:
            raise ValueError("a derived state is stored under its own key and runtime")
        if len(data) > self.max_bytes:
            return False  # larger than the whole cache: never kept
        staged = self.folder / f".{key}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            staged.write_bytes(data)
            os.replace(staged, self.folder / f"{key}{SUFFIX}")
        except OSError as exc:
            staged.unlink(missing_ok=True)
            logger.warning("derived state %s not kept: %s", key[:12], exc)
            return False
        with self._lock:
            self._files[key] = (len(data), tuple(state.tokens))
            self._files.move_to_end(key)
            self._changes += 1
            self._memory[key] = state
            self._evict()
        return True

    def clear(self) -> int:
        """Delete every derived state; return how many there were."""
        with self._lock:
            keys = list(self._files)
            self._files.clear()
            self._changes += 1
            self._memory.clear()
        for key in keys:
            _unlink(self.folder / f"{key}{SUFFIX}")
        return len(keys)


def _open_regular(path: Path):
    """``path`` opened for reading, never through a link nor into a FIFO or device (OSError)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path.name} is not a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _unlink(path: Path) -> None:
    """Delete a file of the folder; what cannot be (a folder in its place, no permission) stays."""
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        logger.warning("cannot delete %s in the derived states: %s", path.name, exc)
