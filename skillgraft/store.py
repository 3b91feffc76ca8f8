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
cache bounded in bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional, Union

from .blocks import BLOCK_SUFFIX, Block, BlockKind, block_id_for, tokens_sha256
from .catalog import open_catalog, utc_now, write_transaction
from .engine import KVState
from .errors import BlockIntegrityError, BlockNotFoundError, InputError, StoreError
from .fingerprint import RuntimeFingerprint

DEFAULT_CACHE_BYTES = 512 * 1024 * 1024
TEMP_SUFFIX = ".part"
Recapture = Callable[[Block], Optional[KVState]]


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


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class BlockStore:
    """The catalog and block files of one store folder."""

    def __init__(self, home: Union[str, Path], *, cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.home = Path(home).expanduser()
        self.blocks_dir = self.home / "blocks"
        self.quarantine_dir = self.home / "quarantine"
        try:
            for folder in (self.home, self.blocks_dir, self.quarantine_dir):
                folder.mkdir(parents=True, exist_ok=True)
            probe = self.blocks_dir / f".probe-{os.getpid()}-{uuid.uuid4().hex}{TEMP_SUFFIX}"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise StoreError(f"cannot write to the store folder {self.home}: {exc.strerror or exc}") from exc
        self.db = open_catalog(self.home / "catalog.db")
        self.cache_bytes = cache_bytes
        self._cache: OrderedDict[str, KVState] = OrderedDict()
        self._cached_bytes = 0

    def close(self) -> None:
        self.db.conn.close()

    # -- reading the catalog ---------------------------------------------------------------

    def _rows(self, where: str = "", params: Iterable = ()) -> list[Block]:
        sql = "SELECT * FROM blocks" + (f" WHERE {where}" if where else "") + " ORDER BY created_at, id"
        return [Block.from_row(row) for row in self.db.query(sql, list(params))]

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
        return self.db["blocks"].count

    def get(self, ref: str) -> Block:
        """A block by id, unique id prefix, or name."""
        if not isinstance(ref, str) or not ref.strip():
            raise InputError("a block id or name is required")
        found = self._rows("id = ? OR name = ?", [ref, ref])
        if not found and len(ref) >= 4:
            found = self._rows("id LIKE ?", [ref.lower() + "%"])
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
        rows = list(self.db.query("SELECT data FROM fingerprints WHERE id = ?", [fingerprint_id]))
        if not rows:
            raise StoreError(f"fingerprint {fingerprint_id} is missing from the catalog")
        return RuntimeFingerprint.model_validate_json(rows[0]["data"])

    def path_of(self, block: Block) -> Path:
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
        """Write a block's file and row crash-safely; return ``(block, created)``."""
        final = self.blocks_dir / block.file_name
        temp = self._write_temp(block, payload)
        try:
            with write_transaction(self.db.conn) as conn:
                existing = self._rows("id = ?", [block.id])
                if existing and existing[0].status == "ok" and final.exists():
                    return existing[0], False
                clash = self._rows("name = ? AND id != ?", [block.name, block.id])
                if clash:
                    raise StoreError(f"the name {block.name!r} is taken by block {clash[0].id}: remove it first")
                os.replace(temp, final)
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

    def _write_temp(self, block: Block, payload: bytes) -> Path:
        """Write and fsync ``payload`` to a temp file named after the block and this process."""
        temp = self.blocks_dir / f".{block.sha256[:16]}.{os.getpid()}.{uuid.uuid4().hex[:8]}{TEMP_SUFFIX}"
        try:
            with open(temp, "wb") as handle:
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as exc:
            temp.unlink(missing_ok=True)
            raise StoreError(f"cannot write block {block.id} ({block.n_bytes} bytes): {exc.strerror or exc}") from exc
        return temp

    def remove(self, ref: str) -> Block:
        """Delete a block's row, routing keys and file."""
        block = self.get(ref)
        with write_transaction(self.db.conn) as conn:
            conn.execute("DELETE FROM routing_keys WHERE block_id = ?", (block.id,))
            conn.execute("DELETE FROM blocks WHERE id = ?", (block.id,))
            self.path_of(block).unlink(missing_ok=True)
        self.evict(block.sha256)
        return block

    # -- reading payloads ------------------------------------------------------------------

    def load_state(self, block: Block) -> LoadedState:
        """The block's verified state, from the cache or from disk (size and SHA-256 checked).

        A corrupt file is moved to ``quarantine/`` and raises :class:`BlockIntegrityError`.
        """
        started = time.perf_counter()
        cached = self._cache.get(block.sha256)
        if cached is not None:
            self._cache.move_to_end(block.sha256)
            return LoadedState(cached, True, time.perf_counter() - started)
        if block.status != "ok":
            raise BlockIntegrityError(f"block {block.id} ({block.name}) is quarantined: run `skillgraft check --repair`")
        path = self.path_of(block)
        try:
            payload = path.read_bytes()
        except FileNotFoundError:
            raise BlockIntegrityError(
                f"block {block.id} ({block.name}): its file {path.name} is missing; run `skillgraft check --repair`"
            ) from None
        except OSError as exc:
            raise StoreError(f"cannot read block {block.id} ({block.name}): {exc.strerror or exc}") from exc
        problem = self._payload_problem(block, payload)
        if problem:
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
        self.evict(block.sha256)
        moved = self._move_to_quarantine(self.path_of(block))
        with write_transaction(self.db.conn) as conn:
            conn.execute("UPDATE blocks SET status = 'quarantined' WHERE id = ?", (block.id,))
        return moved

    def _move_to_quarantine(self, path: Path) -> Optional[Path]:
        if not path.exists():
            return None
        target = self.quarantine_dir / f"{path.name}.{time.strftime('%Y%m%dT%H%M%S')}.{uuid.uuid4().hex[:6]}"
        shutil.move(str(path), target)
        return target

    # -- integrity -------------------------------------------------------------------------

    def check(self, *, repair: bool = False, recapture: Optional[Recapture] = None) -> dict:
        """Verify every block file against the catalog; with ``repair``, settle what is wrong.

        Repair quarantines corrupt files, re-captures a block from its stored source text
        when ``recapture`` can (the new payload must hash to the recorded SHA-256), removes
        temp files of dead processes and moves files without a catalog row to quarantine.
        """
        problems: list[dict] = []
        repaired: list[dict] = []
        integrity = self.db.execute("PRAGMA integrity_check").fetchone()[0]
        if integrity != "ok":
            problems.append({"block_id": None, "problem": f"catalog integrity: {integrity}"})
        blocks = self.blocks(include_quarantined=True)
        for block in blocks:
            path = self.path_of(block)
            if block.status == "quarantined":
                problem = "quarantined"
            elif not path.exists():
                problem = "file missing"
            else:
                problem = self._payload_problem(block, path.read_bytes())
            if not problem:
                continue
            entry = {"block_id": block.id, "name": block.name, "problem": problem}
            if not repair:
                problems.append(entry)
                continue
            if path.exists():
                self._move_to_quarantine(path)
            state = recapture(block) if recapture else None
            if state is not None and state.sha256 == block.sha256:
                self._restore_file(block, state)
                repaired.append({**entry, "action": "re-captured from its source text (byte-identical)"})
            elif block.status != "quarantined":
                self.quarantine(block, problem)
                problems.append({**entry, "problem": f"{problem}; quarantined, re-add it from its source"})
            else:
                problems.append(entry)
        problems += self._check_files(repair, repaired, {b.file_name for b in blocks})
        return {"blocks": len(blocks), "ok": not problems, "problems": problems, "repaired": repaired}

    def _restore_file(self, block: Block, state: KVState) -> None:
        temp = self._write_temp(block, state.payload)
        with write_transaction(self.db.conn) as conn:
            os.replace(temp, self.path_of(block))
            conn.execute("UPDATE blocks SET status = 'ok' WHERE id = ?", (block.id,))

    def _check_files(self, repair: bool, repaired: list[dict], known: set[str]) -> list[dict]:
        """Temp files of dead writers and files no catalog row claims."""
        problems = []
        # Holding the write lock: a live writer renames and inserts under it, so an
        # unclaimed file seen here belongs to a writer that died.
        with write_transaction(self.db.conn):
            for path in sorted(self.blocks_dir.iterdir()):
                if path.name.endswith(TEMP_SUFFIX):
                    parts = path.name.split(".")
                    pid = int(parts[2]) if len(parts) > 3 and parts[2].isdigit() else -1
                    if pid > 0 and _pid_alive(pid):
                        continue
                    entry = {"block_id": None, "file": path.name, "problem": "temp file of an interrupted write"}
                    if repair:
                        path.unlink(missing_ok=True)
                        repaired.append({**entry, "action": "deleted"})
                    else:
                        problems.append(entry)
                elif path.name not in known:
                    entry = {"block_id": None, "file": path.name, "problem": "file without a catalog row"}
                    if repair:
                        self._move_to_quarantine(path)
                        repaired.append({**entry, "action": "moved to quarantine/"})
                    else:
                        problems.append(entry)
        return problems

    # -- routing keys ----------------------------------------------------------------------

    def add_routing_keys(self, block_id: str, keys: Iterable[dict]) -> int:
        """Insert routing keys ``{kind, text, embedder, vector}`` for a block; skip exact repeats."""
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

    def routing_keys(self, block_id: Optional[str] = None) -> list[dict]:
        """Routing keys of one block (or all), with their stored vectors."""
        if block_id:
            return list(self.db.query("SELECT * FROM routing_keys WHERE block_id = ? ORDER BY id", [block_id]))
        return list(self.db.query("SELECT * FROM routing_keys ORDER BY id"))

    def catalog_version(self) -> str:
        """Changes whenever blocks or routing keys change: the router's cache key."""
        row = self.db.execute(
            "SELECT (SELECT COUNT(*) FROM blocks WHERE status = 'ok'), (SELECT COALESCE(MAX(id), 0) FROM routing_keys),"
            " (SELECT COUNT(*) FROM routing_keys), (SELECT COALESCE(MAX(created_at), '') FROM blocks)"
        ).fetchone()
        return ":".join(str(v) for v in row)

    # -- ledger and settings ---------------------------------------------------------------

    def log(self, event: str, **fields) -> None:
        """Append one row to the ledger."""
        row = {"at": utc_now(), "event": event, **fields}
        if isinstance(row.get("timings"), dict):
            row["timings"] = json.dumps(row["timings"])
        if isinstance(row.get("detail"), dict):
            row["detail"] = json.dumps(row["detail"], default=str)
        columns = ", ".join(row)
        with write_transaction(self.db.conn) as conn:
            conn.execute(f"INSERT INTO ledger ({columns}) VALUES ({', '.join('?' for _ in row)})", list(row.values()))

    def ledger(self, limit: int = 100) -> list[dict]:
        return list(self.db.query("SELECT * FROM ledger ORDER BY id DESC LIMIT ?", [limit]))

    def setting(self, key: str, default: Optional[str] = None) -> Optional[str]:
        rows = list(self.db.query("SELECT value FROM settings WHERE key = ?", [key]))
        return rows[0]["value"] if rows else default

    def set_setting(self, key: str, value: str) -> None:
        with write_transaction(self.db.conn) as conn:
            conn.execute("INSERT OR REPLACE INTO settings (key, value) VALUES (?, ?)", (key, value))
