"""BlockStore: block files on disk plus the SQLite catalog, crash-safe and verified.

Layout of a store folder (``$SKILLGRAFT_HOME``, default ``~/.skillgraft``)::

    catalog.db          SQLite (WAL): blocks, fingerprints, routing keys, ledger, settings
    blocks/<sha>.kv     raw per-sequence llama.cpp state, named by its SHA-256
    quarantine/         corrupt or unclaimed files, moved aside, never deleted
    index/              the router's FAISS cache, rebuilt from the catalog when stale

A deposit writes the payload to a temp file, fsyncs it, then under the catalog's write
lock renames it into place and inserts the row in one transaction: a process killed at any
moment leaves either no block or a complete one, plus at most a temp or unclaimed file
that :meth:`BlockStore.check` settles. Payloads are verified (size and SHA-256) on every
read from disk before they can reach llama.cpp; verified payloads are kept in an LRU
cache bounded in bytes. Block files are opened only when they are regular files (never
through a symlink, never blocking on a FIFO).

A store folder that cannot be written (or ``read_only=True``) opens its catalog read-only:
listing, showing and routing work, writes raise :class:`StoreError`.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
import shutil
import sqlite3
import stat
import time
import uuid
from collections import Counter, OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional, Union

from .blocks import Block, BlockKind, block_id_for, tokens_sha256
from .catalog import open_catalog, read_transaction, usable_vector, utc_now, write_transaction
from .states import KVState
from .errors import (
    BlockIntegrityError,
    BlockNotFoundError,
    ConflictError,
    InputError,
    NameTakenError,
    SkillgraftError,
    StoreError,
)
from .fingerprint import RuntimeFingerprint

logger = logging.getLogger("skillgraft.store")

DEFAULT_CACHE_BYTES = 512 * 1024 * 1024
TEMP_SUFFIX = ".part"
Recapture = Callable[[Block], Optional[KVState]]
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
HEX = re.compile(r"[0-9a-f]+")
MIN_PREFIX = 4


@dataclass(frozen=True)
class LoadedState:
    """A verified state and how it was obtained."""

    state: KVState
    from_cache: bool
    read_s: float


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_FILE_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def _not_regular(mode: int) -> str:
    return f"not a regular file ({_FILE_KINDS.get(stat.S_IFMT(mode), 'unknown type')})"


def row_problems(block: Block) -> list[str]:
    """What is inconsistent inside one catalog row: its id, hashes and counts."""
    if not SHA256_HEX.fullmatch(block.sha256):
        return [f"sha256 {block.sha256[:80]!r} is not a SHA-256 hex digest"]
    problems = []
    if block.id != block_id_for(block.sha256):
        problems.append(f"id does not match its SHA-256 (expected {block_id_for(block.sha256)})")
    if block.n_tokens != len(block.tokens):
        problems.append(f"n_tokens is {block.n_tokens} but the row holds {len(block.tokens)} tokens")
    if block.tokens_sha256 != tokens_sha256(block.tokens):
        problems.append("tokens do not match tokens_sha256")
    return problems


def conflict_error(stored: Block, block: Block) -> ConflictError:
    """The question of ``block`` is already stored, as ``stored``, with another answer."""
    return ConflictError(block.question or "", stored.id, stored.answer or "", block.answer or "", block.id)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class BlockStore:
    """The catalog and block files of one store folder.

    ``read_only=None`` (the default) opens a folder that cannot be written read-only when
    it already holds a catalog; ``True`` forces read-only, ``False`` requires writing.
    """

    def __init__(
        self, home: Union[str, Path], *, cache_bytes: int = DEFAULT_CACHE_BYTES, read_only: Optional[bool] = None
    ) -> None:
        self.home = Path(home).expanduser()
        self.blocks_dir = self.home / "blocks"
        self.quarantine_dir = self.home / "quarantine"
        if not read_only:
            read_only = not self._prepare_folders(required=read_only is False)
        self.read_only = read_only
        self.db = open_catalog(self.home / "catalog.db", read_only=read_only)
        self.cache_bytes = cache_bytes
        self._cache: OrderedDict[str, KVState] = OrderedDict()
        self._cached_bytes = 0

    def _prepare_folders(self, *, required: bool) -> bool:
        """Create the folders and prove they can be written; False when the store can only be read."""
        try:
            for folder in (self.home, self.blocks_dir, self.quarantine_dir):
                folder.mkdir(parents=True, exist_ok=True)
            probe = self.blocks_dir / f".probe-{os.getpid()}-{uuid.uuid4().hex}{TEMP_SUFFIX}"
            probe.write_bytes(b"")
            probe.unlink()
            return True
        except OSError as exc:
            readable = exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS) and (self.home / "catalog.db").is_file()
            if required or not readable:
                raise StoreError(f"cannot write to the store folder {self.home}: {exc.strerror or exc}") from exc
            return False

    def _require_writable(self, what: str) -> None:
        if self.read_only:
            raise StoreError(f"the store {self.home} is read-only: cannot {what}")

    def close(self) -> None:
        self.db.conn.close()

    # -- reading the catalog ---------------------------------------------------------------

    def _select(self, sql: str, params: Iterable = ()) -> list[dict]:
        """Rows of a query; a damaged catalog raises :class:`StoreError`, never sqlite3's errors."""
        try:
            return list(self.db.query(sql, list(params)))
        except sqlite3.Error as exc:
            raise StoreError(
                f"cannot read the catalog {self.home / 'catalog.db'}: {exc}; run `skillgraft check`"
            ) from exc

    @staticmethod
    def _block(row: dict) -> Block:
        try:
            return Block.from_row(row)
        except (ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
            detail = str(exc).splitlines()[0][:200]
            raise StoreError(f"catalog row {str(row.get('id'))[:40]!r} is invalid ({detail}); run `skillgraft check`") from None

    def _rows(self, where: str = "", params: Iterable = ()) -> list[Block]:
        sql = "SELECT * FROM blocks" + (f" WHERE {where}" if where else "") + " ORDER BY created_at, id"
        return [self._block(row) for row in self._select(sql, params)]

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads inside the block all see one consistent state of the catalog."""
        try:
            with read_transaction(self.db.conn):
                yield
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read the catalog {self.home / 'catalog.db'}: {exc}") from exc

    def blocks(self, *, kind: Optional[BlockKind] = None, include_quarantined: bool = True) -> list[Block]:
        """Every block, oldest first."""
        clauses, params = [], []
        if kind:
            clauses.append("kind = ?")
            params.append(kind)
        if not include_quarantined:
            clauses.append("status = 'ok'")
        return self._rows(" AND ".join(clauses), params)

    def __len__(self) -> int:
        return self._select("SELECT COUNT(*) AS n FROM blocks")[0]["n"]

    def get(self, ref: str) -> Block:
        """A block by id, name, or a unique prefix (at least 4 hex digits) of its id."""
        if not isinstance(ref, str) or not ref.strip():
            raise InputError("a block id or name is required")
        found = self._rows("id = ? OR name = ?", [ref, ref])
        prefix = ref.lower()
        if not found and len(prefix) >= MIN_PREFIX and HEX.fullmatch(prefix):
            found = self._rows("substr(id, 1, ?) = ?", [len(prefix), prefix])
        if not found:
            raise BlockNotFoundError(f"no block with id or name {ref!r}")
        if len(found) > 1:
            raise BlockNotFoundError(f"{ref!r} matches {len(found)} blocks: give more of the id")
        return found[0]

    def find_same(self, tokens: Iterable[int], fingerprint_id: str) -> Optional[Block]:
        """The block holding exactly these tokens under this runtime, if any."""
        found = self._rows("tokens_sha256 = ? AND fingerprint_id = ?", [tokens_sha256(tokens), fingerprint_id])
        return found[0] if found else None

    def solutions_for(self, question_key: str) -> list[Block]:
        """Healthy solution blocks whose normalized question is ``question_key``."""
        return self._rows("kind = 'solution' AND status = 'ok' AND question_key = ?", [question_key])

    def fingerprint(self, fingerprint_id: str) -> RuntimeFingerprint:
        rows = self._select("SELECT data FROM fingerprints WHERE id = ?", [fingerprint_id])
        if not rows:
            raise StoreError(f"fingerprint {fingerprint_id} is missing from the catalog")
        try:
            return RuntimeFingerprint.model_validate_json(rows[0]["data"])
        except (ValueError, TypeError) as exc:
            raise StoreError(f"fingerprint {fingerprint_id} in the catalog is invalid: {str(exc).splitlines()[0]}") from None

    def path_of(self, block: Block) -> Path:
        """``blocks/<sha256>.kv``; a row whose sha256 is not hex names no file."""
        if not SHA256_HEX.fullmatch(block.sha256):
            raise BlockIntegrityError(f"block {block.id} ({block.name}): its sha256 is not a SHA-256, so it has no file")
        return self.blocks_dir / block.file_name

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
        if hashlib.sha256(state.payload).hexdigest() != state.sha256:
            raise BlockIntegrityError(f"block {name!r}: payload does not match its SHA-256")
        block = Block(
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
        """Write a block's file and row crash-safely; return ``(block, created)``.

        The row must be consistent (id, hashes, counts, fingerprint) and the payload must
        hash to it. Under the write lock: the same block returns the stored one; a solution
        for a question already stored returns that block (same answer) or raises
        :class:`ConflictError` (another answer), so racing writers cannot both win.
        """
        self._require_writable(f"store block {block.id}")
        problems = row_problems(block)
        if len(payload) != block.n_bytes or hashlib.sha256(payload).hexdigest() != block.sha256:
            problems.append("payload does not match its size or SHA-256")
        if fingerprint.id != block.fingerprint_id:
            problems.append(f"fingerprint {fingerprint.id} is not the block's {block.fingerprint_id}")
        if problems:
            raise BlockIntegrityError(f"block {block.id} ({block.name}): " + "; ".join(problems))
        final = self.path_of(block)
        temp = self._write_temp(block, payload)
        try:
            with write_transaction(self.db.conn) as conn:
                existing = self._rows("id = ?", [block.id])
                if existing and existing[0].status == "ok" and self._is_regular_file(final):
                    return existing[0], False
                if block.kind == "solution" and block.question_key is not None:
                    stored = self._same_question(block)
                    if stored is not None:
                        return stored, False
                clash = self._rows("name = ? AND id != ?", [block.name, block.id])
                if clash:
                    raise StoreError(f"the name {block.name!r} is taken by block {clash[0].id}: remove it first")
                if os.path.lexists(final) and not self._is_regular_file(final):
                    self._move_to_quarantine(final)
                try:
                    os.replace(temp, final)
                except OSError as exc:
                    raise StoreError(f"cannot write block {block.id}: {exc.strerror or exc}") from exc
                _fsync_dir(self.blocks_dir)
                conn.execute(
                    "INSERT OR IGNORE INTO fingerprints (id, data, created_at) VALUES (?, ?, ?)",
                    (fingerprint.id, fingerprint.canonical_json(), utc_now()),
                )
                row = block.to_row()
                columns = ", ".join(row)
                conn.execute(
                    f"INSERT OR REPLACE INTO blocks ({columns}) VALUES ({', '.join('?' for _ in row)})",
                    list(row.values()),
                )
        finally:
            temp.unlink(missing_ok=True)
        return block, True

    def _same_question(self, block: Block) -> Optional[Block]:
        """The healthy solution already stored for ``block``'s question, if its answer agrees."""
        for stored in self._rows(
            "kind = 'solution' AND status = 'ok' AND question_key = ? AND id != ?", [block.question_key, block.id]
        ):
            if stored.answer != block.answer:
                raise conflict_error(stored, block)
            return stored
        return None

    def _write_temp(self, block: Block, payload: bytes) -> Path:
        """Write and fsync ``payload`` to a temp file named after the block and this process."""
        temp = self.blocks_dir / f".{block.sha256[:16]}.{os.getpid()}.{uuid.uuid4().hex[:8]}{TEMP_SUFFIX}"
        try:
            with open(temp, "xb") as handle:
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as exc:
            temp.unlink(missing_ok=True)
            raise StoreError(f"cannot write block {block.id} ({block.n_bytes} bytes): {exc.strerror or exc}") from exc
        return temp

    def remove(self, ref: str) -> Block:
        """Delete a block's row and routing keys, and its file unless another row shares it."""
        self._require_writable(f"remove {ref!r}")
        block = self.get(ref)
        with write_transaction(self.db.conn) as conn:
            conn.execute("DELETE FROM routing_keys WHERE block_id = ?", (block.id,))
            conn.execute("DELETE FROM blocks WHERE id = ?", (block.id,))
            shared = conn.execute("SELECT 1 FROM blocks WHERE sha256 = ? LIMIT 1", (block.sha256,)).fetchone()
            if not shared and SHA256_HEX.fullmatch(block.sha256):
                self._discard(self.path_of(block))
        if not shared:
            self.evict(block.sha256)
        return block

    # -- reading payloads ------------------------------------------------------------------

    @staticmethod
    def _is_regular_file(path: Path) -> bool:
        try:
            return stat.S_ISREG(os.lstat(path).st_mode)
        except OSError:
            return False

    def _read_file(self, block: Block) -> tuple[Optional[bytes], Optional[str]]:
        """``(payload, None)``, or ``(None, problem)`` for a file that is missing, not a
        regular file, of the wrong size or unreadable. Never follows a symlink, never
        blocks on a FIFO, never opens a device."""
        path = self.path_of(block)
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return None, "file missing"
        except OSError as exc:
            return None, f"unreadable ({exc.strerror or exc})"
        if not stat.S_ISREG(mode):
            return None, _not_regular(mode)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return None, "file missing"
        except OSError as exc:
            return None, "not a regular file (a symbolic link)" if exc.errno == errno.ELOOP else f"unreadable ({exc.strerror or exc})"
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                return None, _not_regular(info.st_mode)
            if info.st_size != block.n_bytes:
                return None, f"{info.st_size} bytes, expected {block.n_bytes}"
            with os.fdopen(os.dup(fd), "rb") as handle:
                payload = handle.read(block.n_bytes + 1)
        except OSError as exc:
            return None, f"unreadable ({exc.strerror or exc})"
        finally:
            os.close(fd)
        return payload, None

    def load_state(self, block: Block) -> LoadedState:
        """The block's verified state, from the cache or from disk (size and SHA-256 checked).

        A corrupt file, or anything but a regular file, is moved to ``quarantine/`` and
        raises :class:`BlockIntegrityError`; so does a row that is inconsistent in itself.
        """
        started = time.perf_counter()
        cached = self._cache.get(block.sha256)
        if cached is not None and cached.tokens == block.tokens:
            self._cache.move_to_end(block.sha256)
            return LoadedState(cached, True, time.perf_counter() - started)
        if block.status != "ok":
            raise BlockIntegrityError(f"block {block.id} ({block.name}) is quarantined: run `skillgraft check --repair`")
        inconsistent = row_problems(block)
        if inconsistent:
            raise BlockIntegrityError(f"block {block.id} ({block.name}) has an inconsistent catalog row: {'; '.join(inconsistent)}")
        payload, problem = self._read_file(block)
        if problem == "file missing":
            raise BlockIntegrityError(
                f"block {block.id} ({block.name}): its file {block.file_name} is missing; run `skillgraft check --repair`"
            )
        if problem and problem.startswith("unreadable"):
            raise StoreError(f"cannot read block {block.id} ({block.name}): {problem}")
        problem = problem or self._payload_problem(block, payload)
        if problem:
            if self.read_only:
                raise BlockIntegrityError(f"block {block.id} ({block.name}) is corrupt ({problem})")
            self.quarantine(block, problem)
            raise BlockIntegrityError(f"block {block.id} ({block.name}) is corrupt ({problem}); moved to quarantine/")
        state = KVState(block.tokens, payload, block.sha256, self.fingerprint(block.fingerprint_id))
        self._remember(state)
        return LoadedState(state, False, time.perf_counter() - started)

    @staticmethod
    def _payload_problem(block: Block, payload: bytes) -> Optional[str]:
        if len(payload) != block.n_bytes:
            return f"{len(payload)} bytes, expected {block.n_bytes}"
        if hashlib.sha256(payload).hexdigest() != block.sha256:
            return "SHA-256 mismatch"
        return None

    def _remember(self, state: KVState) -> None:
        if state.n_bytes > self.cache_bytes or state.sha256 in self._cache:
            return
        self._cache[state.sha256] = state
        self._cached_bytes += state.n_bytes
        while self._cached_bytes > self.cache_bytes:
            _, evicted = self._cache.popitem(last=False)
            self._cached_bytes -= evicted.n_bytes

    def evict(self, sha256: str) -> None:
        """Drop a payload from the LRU cache (its next load reads and verifies the file)."""
        evicted = self._cache.pop(sha256, None)
        if evicted is not None:
            self._cached_bytes -= evicted.n_bytes

    def quarantine(self, block: Block, reason: str) -> Optional[Path]:
        """Move a block's file aside and mark its row; routing skips quarantined blocks."""
        self._require_writable(f"quarantine block {block.id}")
        self.evict(block.sha256)
        moved = self._move_to_quarantine(self.path_of(block))
        self._mark_quarantined(block)
        return moved

    def _mark_quarantined(self, block: Block) -> None:
        with write_transaction(self.db.conn) as conn:
            conn.execute("UPDATE blocks SET status = 'quarantined' WHERE id = ?", (block.id,))

    def _move_to_quarantine(self, path: Path) -> Optional[Path]:
        """Move whatever is at ``path`` (a file, a link itself, a folder, a FIFO) aside."""
        if not os.path.lexists(path):
            return None
        target = self.quarantine_dir / f"{path.name}.{time.strftime('%Y%m%dT%H%M%S')}.{uuid.uuid4().hex[:6]}"
        try:
            self.quarantine_dir.mkdir(parents=True, exist_ok=True)
            os.rename(path, target)
        except OSError as exc:
            if exc.errno != errno.EXDEV or not self._is_regular_file(path):
                raise StoreError(f"cannot move {path.name} to quarantine/: {exc.strerror or exc}") from exc
            shutil.move(str(path), target)
        return target

    def _discard(self, path: Path) -> str:
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
        self._move_to_quarantine(path)
        return "moved to quarantine/"

    # -- integrity -------------------------------------------------------------------------

    def check(self, *, repair: bool = False, recapture: Optional[Recapture] = None) -> dict:
        """Verify the catalog and every block file; with ``repair``, settle what is wrong.

        Reports, never raises on, a damaged catalog, invalid or inconsistent rows, files
        missing, of the wrong size or hash, unreadable or not regular files, routing keys
        of missing blocks or with malformed vectors, temp and unclaimed files.

        Repair quarantines corrupt files, re-captures a block from its stored source text
        when ``recapture`` can (the new payload must hash to the recorded SHA-256), removes
        temp files of dead processes and moves files without a catalog row to quarantine.
        One block that cannot be repaired is reported; the others are still repaired.
        """
        if repair:
            self._require_writable("repair it")
        problems: list[dict] = self._catalog_problems()
        repaired: list[dict] = []
        try:
            rows = self._select("SELECT * FROM blocks ORDER BY created_at, id")
        except StoreError as exc:
            problems.append({"block_id": None, "problem": f"catalog unreadable: {exc}"})
            return {"blocks": 0, "ok": False, "problems": problems, "repaired": repaired}
        blocks = []
        for row in rows:
            try:
                blocks.append(self._block(row))
            except StoreError as exc:
                problems.append({"block_id": str(row.get("id")), "problem": str(exc)})
        for block in blocks:
            try:
                self._check_block(block, repair, recapture, problems, repaired)
            except (SkillgraftError, OSError) as exc:
                problems.append({"block_id": block.id, "name": block.name, "problem": f"repair failed: {exc}"})
        for step in (self._check_routing_keys, self._check_files):
            try:
                problems += step(repair, repaired, {b.file_name for b in blocks})
            except (SkillgraftError, OSError) as exc:
                problems.append({"block_id": None, "problem": f"check failed: {exc}"})
        return {"blocks": len(rows), "ok": not problems, "problems": problems, "repaired": repaired}

    def _catalog_problems(self) -> list[dict]:
        try:
            messages = [row[0] for row in self.db.execute("PRAGMA integrity_check").fetchall()]
        except sqlite3.Error as exc:
            messages = [str(exc)]
        if messages == ["ok"]:
            return []
        shown = "; ".join(str(m) for m in messages[:5]) + (f" (+{len(messages) - 5} more)" if len(messages) > 5 else "")
        return [{"block_id": None, "problem": f"catalog integrity: {shown}"}]

    def _check_block(self, block: Block, repair: bool, recapture: Optional[Recapture], problems: list, repaired: list) -> None:
        entry = {"block_id": block.id, "name": block.name}
        inconsistent = row_problems(block)
        if inconsistent:
            quarantine = repair and block.status == "ok"
            if quarantine:
                self._mark_quarantined(block)
            suffix = "; quarantined, remove it and re-add it from its source" if quarantine else ""
            problems += [{**entry, "problem": problem + suffix} for problem in inconsistent]
            return
        path = self.path_of(block)
        if block.status == "quarantined":
            problem = "quarantined"
        else:
            payload, problem = self._read_file(block)
            problem = problem or self._payload_problem(block, payload)
        if not problem:
            return
        entry = {**entry, "problem": problem}
        if not repair:
            problems.append(entry)
            return
        self._move_to_quarantine(path)
        self.evict(block.sha256)
        state = recapture(block) if recapture else None
        if state is not None and state.sha256 == block.sha256:
            self._restore_file(block, state)
            repaired.append({**entry, "action": "re-captured from its source text (byte-identical)"})
        elif block.status != "quarantined":
            self._mark_quarantined(block)
            problems.append({**entry, "problem": f"{problem}; quarantined, re-add it from its source"})
        else:
            problems.append(entry)

    def _restore_file(self, block: Block, state: KVState) -> None:
        temp = self._write_temp(block, state.payload)
        try:
            with write_transaction(self.db.conn) as conn:
                os.replace(temp, self.path_of(block))
                conn.execute("UPDATE blocks SET status = 'ok' WHERE id = ?", (block.id,))
        except OSError as exc:
            raise StoreError(f"cannot restore block {block.id}: {exc.strerror or exc}") from exc
        finally:
            temp.unlink(missing_ok=True)

    def _check_routing_keys(self, repair: bool, repaired: list[dict], known: set[str]) -> list[dict]:
        """Routing keys of blocks the catalog lacks, and keys whose vector is malformed."""
        problems = []
        orphans = self._select("SELECT id, block_id FROM routing_keys WHERE block_id NOT IN (SELECT id FROM blocks)")
        rows = self._select("SELECT id, block_id, vector FROM routing_keys WHERE vector IS NOT NULL")
        lengths = Counter(len(r["vector"]) for r in rows if isinstance(r["vector"], bytes))
        common = lengths.most_common(1)[0][0] if lengths else None
        malformed = [r for r in rows if not usable_vector(r["vector"], common)]
        for found, problem, action, sql in (
            (orphans, "routing key of a block the catalog lacks", "deleted", "DELETE FROM routing_keys WHERE id = ?"),
            (malformed, "routing key with a malformed vector", "vector dropped: re-embedded from its text on the next route",
             "UPDATE routing_keys SET vector = NULL WHERE id = ?"),
        ):
            if not found:
                continue
            entries = [{"block_id": r["block_id"], "key_id": r["id"], "problem": problem} for r in found]
            if repair:
                with write_transaction(self.db.conn) as conn:
                    conn.executemany(sql, [(r["id"],) for r in found])
                repaired += [{**e, "action": action} for e in entries]
            else:
                problems += entries
        return problems

    def _check_files(self, repair: bool, repaired: list[dict], known: set[str]) -> list[dict]:
        """Temp files of dead writers and files no catalog row claims."""
        problems = []
        # Holding the write lock: a live writer renames and inserts under it, so an
        # unclaimed file seen here belongs to a writer that died.
        with (read_transaction(self.db.conn) if self.read_only else write_transaction(self.db.conn)):
            try:
                entries = sorted(self.blocks_dir.iterdir())
            except OSError as exc:
                return [{"block_id": None, "file": "blocks/", "problem": f"unreadable ({exc.strerror or exc})"}]
            for path in entries:
                if path.name.endswith(TEMP_SUFFIX):
                    parts = path.name.split(".")
                    pid = int(parts[2]) if len(parts) > 3 and parts[2].isdigit() else -1
                    if pid > 0 and _pid_alive(pid):
                        continue
                    entry = {"block_id": None, "file": path.name, "problem": "temp file of an interrupted write"}
                    if repair:
                        repaired.append({**entry, "action": self._discard(path)})
                    else:
                        problems.append(entry)
                elif path.name not in known:
                    problem = "file without a catalog row"
                    if not self._is_regular_file(path):
                        problem += f", {_not_regular(os.lstat(path).st_mode)}"
                    entry = {"block_id": None, "file": path.name, "problem": problem}
                    if repair:
                        self._move_to_quarantine(path)
                        repaired.append({**entry, "action": "moved to quarantine/"})
                    else:
                        problems.append(entry)
        return problems

    # -- routing keys ----------------------------------------------------------------------

    def add_routing_keys(self, block_id: str, keys: Iterable[dict]) -> int:
        """Insert routing keys ``{kind, text, embedder, vector}`` for a block; skip exact repeats."""
        self._require_writable(f"add routing keys to block {block_id}")
        added = 0
        with write_transaction(self.db.conn) as conn:
            for key in keys:
                seen = conn.execute(
                    "SELECT 1 FROM routing_keys WHERE block_id = ? AND kind = ? AND text = ? AND embedder = ?",
                    (block_id, key["kind"], key["text"], key["embedder"]),
                ).fetchone()
                if not seen:
                    conn.execute(
                        "INSERT INTO routing_keys (block_id, kind, text, embedder, vector) VALUES (?, ?, ?, ?, ?)",
                        (block_id, key["kind"], key["text"], key["embedder"], key["vector"]),
                    )
                    added += 1
        return added

    def set_routing_vectors(self, rows: list[dict], version: str) -> Optional[str]:
        """Store re-embedded vectors ``{id, embedder, vector}``; the catalog version after, if
        nothing else changed the catalog since ``version`` (else None)."""
        self._require_writable("re-embed routing keys")
        with write_transaction(self.db.conn) as conn:
            unchanged = self.catalog_version() == version
            for row in rows:
                conn.execute(
                    "UPDATE routing_keys SET embedder = ?, vector = ? WHERE id = ?",
                    (row["embedder"], row["vector"], row["id"]),
                )
            return self.catalog_version() if unchanged else None

    def routing_keys(self, block_id: Optional[str] = None) -> list[dict]:
        """Routing keys of one block (or all), with their stored vectors."""
        if block_id:
            return self._select("SELECT * FROM routing_keys WHERE block_id = ? ORDER BY id", [block_id])
        return self._select("SELECT * FROM routing_keys ORDER BY id")

    def count_stale_keys(self, embedder: str) -> int:
        """Routing keys without a vector, or written by another embedder than ``embedder``."""
        return self._select(
            "SELECT COUNT(*) AS n FROM routing_keys WHERE embedder != ? OR vector IS NULL", [embedder]
        )[0]["n"]

    def catalog_version(self) -> str:
        """Changes whenever blocks or routing keys change: the router's cache key.

        The catalog's random id and a counter bumped by triggers on every change, so it
        never repeats, whatever the rows hold and whichever process wrote them.
        """
        try:
            row = self.db.execute("SELECT catalog_id, version FROM catalog_state WHERE id = 1").fetchone()
        except sqlite3.OperationalError:
            row = None  # a catalog older than the counter, opened read-only
        except sqlite3.Error as exc:
            raise StoreError(f"cannot read the catalog {self.home / 'catalog.db'}: {exc}; run `skillgraft check`") from exc
        if row:
            return f"{row[0]}:{row[1]}"
        legacy = self._select(
            "SELECT (SELECT COUNT(*) FROM blocks) AS a, (SELECT COALESCE(SUM(length(id) + n_bytes), 0) FROM blocks) AS b,"
            " (SELECT COALESCE(MAX(id), 0) FROM routing_keys) AS c, (SELECT COUNT(*) FROM routing_keys) AS d,"
            " (SELECT group_concat(id || status) FROM blocks) AS e"
        )[0]
        return "legacy:" + hashlib.sha256(json.dumps(legacy, default=str).encode()).hexdigest()[:16]

    # -- ledger and settings ---------------------------------------------------------------

    def log(self, event: str, **fields) -> None:
        """Append one row to the ledger (skipped, not refused, in a read-only store)."""
        if self.read_only:
            logger.debug("read-only store: ledger row %r not written", event)
            return
        row = {"at": utc_now(), "event": event, **fields}
        if isinstance(row.get("timings"), dict):
            row["timings"] = json.dumps(row["timings"])
        if isinstance(row.get("detail"), dict):
            row["detail"] = json.dumps(row["detail"], default=str)
        columns = ", ".join(row)
        with write_transaction(self.db.conn) as conn:
            conn.execute(f"INSERT INTO ledger ({columns}) VALUES ({', '.join('?' for _ in row)})", list(row.values()))

    def ledger(self, limit: int = 100) -> list[dict]:
        return self._select("SELECT * FROM ledger ORDER BY id DESC LIMIT ?", [limit])

    def setting(self, key: str, default: Optional[str] = None) -> Optional[str]:
        rows = self._select("SELECT value FROM settings WHERE key = ?", [key])
        return rows[0]["value"] if rows else default

    def set_setting(self, key: str, value: str) -> None:
        self._require_writable(f"change the setting {key}")
        with write_transaction(self.db.conn) as conn:
            conn.execute("INSERT OR REPLACE INTO settings (key, value) VALUES (?, ?)", (key, value))

    # -- edits the memory verbs make -------------------------------------------------------

    def fingerprint_ids(self) -> set[str]:
        """The runtimes the healthy blocks were captured under."""
        rows = self.db.query("SELECT DISTINCT fingerprint_id FROM blocks WHERE status = 'ok'")
        return {row["fingerprint_id"] for row in rows}

    def rename(self, block_id: str, new_name: str) -> Block:
        """Give a block a new name, or raise :class:`NameTakenError`."""
        self._require_writable(f"rename block {block_id}")
        with write_transaction(self.db.conn) as conn:
            clash = conn.execute("SELECT id FROM blocks WHERE name = ? AND id != ?", (new_name, block_id)).fetchone()
            if clash:
                raise NameTakenError(new_name, clash[0])
            conn.execute("UPDATE blocks SET name = ? WHERE id = ?", (new_name, block_id))
        return self._by_id(block_id)

    def set_description(self, block_id: str, description: str) -> Block:
        self._require_writable(f"describe block {block_id}")
        with write_transaction(self.db.conn) as conn:
            conn.execute("UPDATE blocks SET description = ? WHERE id = ?", (description, block_id))
        return self._by_id(block_id)

    def delete_routing_keys(self, block_id: str, *, kind: str) -> None:
        self._require_writable(f"change the keys of block {block_id}")
        with write_transaction(self.db.conn) as conn:
            conn.execute("DELETE FROM routing_keys WHERE block_id = ? AND kind = ?", (block_id, kind))

    def _by_id(self, block_id: str) -> Block:
        found = self._rows("id = ?", [block_id])
        if not found:
            raise BlockNotFoundError(f"no block with id {block_id!r}")
        return found[0]

    def replace(self, old: Block, state: KVState, *, source: str) -> Block:
        """Swap ``old`` for a new capture in one transaction, keeping its name, kind, answer and keys.

        A process killed at any moment leaves either the old block or the new one.
        """
        self._require_writable(f"replace block {old.id}")
        kept = old.model_dump(
            exclude={"id", "sha256", "source", "tokens", "tokens_sha256", "n_tokens", "n_bytes",
                     "fingerprint_id", "created_at", "status"}
        )
        new = Block(
            id=block_id_for(state.sha256), sha256=state.sha256, source=source, tokens=state.tokens,
            tokens_sha256=tokens_sha256(state.tokens), n_tokens=state.n_tokens, n_bytes=state.n_bytes,
            fingerprint_id=state.fingerprint.id, created_at=utc_now(), **kept,
        )
        if new.id == old.id and old.status == "ok" and self.path_of(old).exists():
            if old.fingerprint_id == new.fingerprint_id:
                return old
            # The same bytes under another runtime (measured: n_ctx changes no payload): re-label.
            with write_transaction(self.db.conn) as conn:
                conn.execute(
                    "INSERT OR IGNORE INTO fingerprints (id, data, created_at) VALUES (?, ?, ?)",
                    (state.fingerprint.id, state.fingerprint.canonical_json(), utc_now()),
                )
                conn.execute("UPDATE blocks SET fingerprint_id = ? WHERE id = ?", (new.fingerprint_id, old.id))
            return self._by_id(old.id)
        temp = self._write_temp(new, state.payload)
        try:
            with write_transaction(self.db.conn) as conn:
                taken = conn.execute("SELECT id FROM blocks WHERE id = ? AND id != ?", (new.id, old.id)).fetchone()
                if taken:
                    raise StoreError(f"block {old.id} ({old.name}) recaptures as {new.id}, which the store already holds")
                os.replace(temp, self.path_of(new))
                _fsync_dir(self.blocks_dir)
                conn.execute(
                    "INSERT OR IGNORE INTO fingerprints (id, data, created_at) VALUES (?, ?, ?)",
                    (state.fingerprint.id, state.fingerprint.canonical_json(), utc_now()),
                )
                conn.execute("UPDATE blocks SET name = ? WHERE id = ?", (f"{old.name}\x1freplaced-{old.id}", old.id))
                row = new.to_row()
                conn.execute(
                    f"INSERT OR REPLACE INTO blocks ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})",
                    list(row.values()),
                )
                if new.id != old.id:
                    conn.execute("UPDATE routing_keys SET block_id = ? WHERE block_id = ?", (new.id, old.id))
                    conn.execute("DELETE FROM blocks WHERE id = ?", (old.id,))
                    shared = conn.execute("SELECT 1 FROM blocks WHERE sha256 = ?", (old.sha256,)).fetchone()
                    if not shared:
                        self.path_of(old).unlink(missing_ok=True)
        finally:
            temp.unlink(missing_ok=True)
        self.evict(old.sha256)
        return new
