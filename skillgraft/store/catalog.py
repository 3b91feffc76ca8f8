"""The catalog's numbered migrations and its embedded SQLite backend.

The catalog (``catalog.db``, WAL mode) is the store's source of truth. Several processes
may write at once: every write runs in a ``BEGIN IMMEDIATE`` transaction with a long busy
timeout, and a locked database is retried with backoff, so "database is locked" never
reaches the user unless the lock is held for minutes.

``catalog_state`` holds the catalog's random id and a version counter that triggers bump
on every change to ``blocks`` or ``routing_keys``, whoever makes it: the router's cache key.
A catalog opened read-only never writes (no WAL switch, no migration).
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
import uuid
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

from sqlite_utils import Database

from ..errors import StoreError

BUSY_TIMEOUT_S = 60.0
LOCK_RETRY_S = 300.0

Migration = Callable[[Database], None]
MIGRATIONS: list[Migration] = []


def migration(function: Migration) -> Migration:
    """Register a migration; they run in the order of their numbers (``mNNN_``), once each."""
    MIGRATIONS.append(function)
    MIGRATIONS.sort(key=lambda step: step.__name__)
    return function


@migration
def m001_create_blocks(db: Database) -> None:
    db["blocks"].create(
        {
            "id": str, "sha256": str, "name": str, "kind": str, "description": str, "source": str,
            "tokens": bytes, "tokens_sha256": str, "n_tokens": int, "n_bytes": int, "fingerprint_id": str,
            "created_at": str, "status": str, "question": str,
            "question_key": str,
            "answer": str,
            "method": str,
            "verifier": str,
            "verifier_output_sha256": str,
            "verify_seconds": float,
        },
        pk="id",
        not_null={"sha256", "name", "kind", "source", "tokens", "n_tokens", "n_bytes", "fingerprint_id", "status"},
    )
    db["blocks"].create_index(["name"], unique=True)
    db["blocks"].create_index(["tokens_sha256", "fingerprint_id"])
    db["blocks"].create_index(["question_key"])


@migration
def m002_create_fingerprints(db: Database) -> None:
    db["fingerprints"].create({"id": str, "data": str, "created_at": str}, pk="id")


@migration
def m003_create_routing_keys(db: Database) -> None:
    db["routing_keys"].create(
        {"id": int, "block_id": str, "kind": str, "text": str, "embedder": str, "vector": bytes},
        pk="id",
        foreign_keys=[("block_id", "blocks", "id")],
    )
    db["routing_keys"].create_index(["block_id"])
    db["routing_keys"].create_index(["embedder"])


@migration
def m004_create_ledger(db: Database) -> None:
    db["ledger"].create(
        {
            "id": int,
            "at": str,
            "event": str,
            "query_sha256": str,
            "decision": str,
            "block_id": str,
            "score": float,
            "threshold": float,
            "decoded_tokens": int,
            "prefill_tokens_avoided": int,
            "timings": str,
            "logits_sha256": str,
            "detail": str,
        },
        pk="id",
    )


@migration
def m005_create_settings(db: Database) -> None:
    db["settings"].create({"key": str, "value": str}, pk="key")


@migration
def m006_create_catalog_state(db: Database) -> None:
    db.execute("CREATE TABLE catalog_state (id INTEGER PRIMARY KEY CHECK (id = 1), catalog_id TEXT NOT NULL, version INTEGER NOT NULL)")
    db.execute("INSERT INTO catalog_state VALUES (1, ?, 0)", [uuid.uuid4().hex])
    for table in ("blocks", "routing_keys"):
        for event in ("INSERT", "UPDATE", "DELETE"):
            db.execute(
                f"CREATE TRIGGER bump_version_{table}_{event.lower()} AFTER {event} ON {table} "
                "BEGIN UPDATE catalog_state SET version = version + 1 WHERE id = 1; END"
            )


@migration
def m007_retire_thread_count(db: Database) -> None:
    """Fingerprints lose the thread count (it changes no payload or logit): re-key them."""
    rekey_fingerprints(db)


def rekey_fingerprints(db: Database) -> None:
    """Each recorded fingerprint under the id it has now that fields were retired; its blocks
    follow it (two that differed only in a retired field become one)."""
    from ..core.fingerprint import RuntimeFingerprint

    for old_id, data in list(db.execute("SELECT id, data FROM fingerprints").fetchall()):
        try:
            fingerprint = RuntimeFingerprint.model_validate_json(data)
        except ValueError:
            continue  # `skillgraft check` reports a damaged row; a migration never fails on one
        if fingerprint.id != old_id:
            db.execute(
                "INSERT OR IGNORE INTO fingerprints (id, data, created_at) VALUES (?, ?, ?)",
                [fingerprint.id, fingerprint.canonical_json(), utc_now()],
            )
            db.execute("UPDATE blocks SET fingerprint_id = ? WHERE fingerprint_id = ?", [fingerprint.id, old_id])
            db.execute("DELETE FROM fingerprints WHERE id = ?", [old_id])


@migration
def m024_retire_context_window(db: Database) -> None:
    """Fingerprints lose the context window (it changes no payload or logit): re-key them, so a
    store captured under one window serves under another."""
    rekey_fingerprints(db)


@migration
def m008_rekey_questions(db: Database) -> None:
    """Solutions get the stricter recurrence key, which keeps every symbol of the question."""
    from ..core.questions import normalize_question

    rows = db.execute("SELECT id, question FROM blocks WHERE kind = 'solution' AND question IS NOT NULL").fetchall()
    for block_id, question in rows:
        db.execute("UPDATE blocks SET question_key = ? WHERE id = ?", [normalize_question(question), block_id])


@migration
def m009_record_blake3(db: Database) -> None:
    """Blocks may record their payload's BLAKE3, verified on reads; rows without one keep SHA-256."""
    db.execute("ALTER TABLE blocks ADD COLUMN blake3 TEXT")


@migration
def m010_index_ledger_by_block(db: Database) -> None:
    """A block's ledger history and use counts are read by block id."""
    db.execute("CREATE INDEX IF NOT EXISTS idx_ledger_block_id ON ledger (block_id, id)")


@migration
def m011_record_key_origin(db: Database) -> None:
    """Routing keys may record when and by whom they were made (corrections do)."""
    db.execute("ALTER TABLE routing_keys ADD COLUMN created_at TEXT")
    db.execute("ALTER TABLE routing_keys ADD COLUMN created_by TEXT")


@migration
def m012_create_staged_vectors(db: Database) -> None:
    """Vectors of another encoder, staged by a re-embed until it switches every key at once."""
    db.execute(
        "CREATE TABLE staged_vectors (key_id BIGINT NOT NULL, embedder TEXT NOT NULL, text TEXT NOT NULL,"
        " vector BLOB NOT NULL, PRIMARY KEY (key_id, embedder))"
    )


@migration
def m013_create_skills(db: Database) -> None:
    """Imported Agent Skills: each skill's versions, their files (manifest and bytes) and blocks."""
    db.execute("CREATE TABLE skills (name TEXT PRIMARY KEY, default_version BIGINT NOT NULL, created_at TEXT)")
    db.execute(
        "CREATE TABLE skill_versions (name TEXT NOT NULL, version BIGINT NOT NULL, folder TEXT,"
        " manifest_sha256 TEXT NOT NULL, description TEXT NOT NULL, record TEXT NOT NULL, created_at TEXT,"
        " PRIMARY KEY (name, version))"
    )
    db.execute(
        "CREATE TABLE skill_files (name TEXT NOT NULL, version BIGINT NOT NULL, path TEXT NOT NULL,"
        " size BIGINT NOT NULL, sha256 TEXT NOT NULL, data BLOB, PRIMARY KEY (name, version, path))"
    )
    db.execute(
        "CREATE TABLE skill_blocks (name TEXT NOT NULL, version BIGINT NOT NULL, part BIGINT NOT NULL,"
        " block_id TEXT NOT NULL, role TEXT NOT NULL, title TEXT NOT NULL, PRIMARY KEY (name, version, part))"
    )
    db.execute("CREATE INDEX idx_skill_blocks_block_id ON skill_blocks (block_id)")


@migration
def m014_create_derived_states(db: Database) -> None:
    """Derived prefix states the hosts of a shared store publish (:mod:`skillgraft.store.shared_derived`)."""
    db.execute(
        "CREATE TABLE derived_states (key TEXT PRIMARY KEY, fingerprint_id TEXT NOT NULL, n_tokens BIGINT NOT NULL,"
        " tokens BLOB NOT NULL, n_bytes BIGINT NOT NULL, parent TEXT, created_at TEXT NOT NULL, last_used TEXT NOT NULL)"
    )
    db.execute("CREATE INDEX idx_derived_states_fingerprint_id ON derived_states (fingerprint_id, last_used)")


@migration
def m017_scope_derived_states(db: Database) -> None:
    """A published derived state records its reuse scope and its payload's SHA-256 (checked on
    every restore); rows published before are of no scope and unchecked: removed."""
    db.execute("DELETE FROM derived_states")
    db.execute("ALTER TABLE derived_states ADD COLUMN scope TEXT NOT NULL DEFAULT ''")
    db.execute("ALTER TABLE derived_states ADD COLUMN sha256 TEXT")
    db.execute("CREATE INDEX idx_derived_states_parent ON derived_states (parent)")


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _is_locked(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def retry_locked(action: Callable[[], object], what: str) -> object:
    """Run ``action``, retrying with jittered backoff while the database is locked."""
    deadline = time.monotonic() + LOCK_RETRY_S
    delay = 0.02
    while True:
        try:
            return action()
        except sqlite3.Error as exc:
            locked = isinstance(exc, sqlite3.OperationalError) and _is_locked(exc)
            if not locked or time.monotonic() > deadline:
                raise StoreError(f"catalog {what} failed: {exc}") from exc
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 1.0)


@contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back on error; waits out other writers."""
    retry_locked(lambda: conn.execute("BEGIN IMMEDIATE"), "lock")
    try:
        yield conn
    except BaseException as exc:
        _rollback(conn)
        if isinstance(exc, sqlite3.Error):
            raise StoreError(f"catalog write failed: {exc}") from exc
        raise
    else:
        try:
            retry_locked(lambda: conn.execute("COMMIT"), "commit")
        except StoreError:
            _rollback(conn)
            raise


@contextmanager
def read_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One consistent snapshot for several reads (inside a transaction already: that one)."""
    if conn.in_transaction:
        yield conn
        return
    retry_locked(lambda: conn.execute("BEGIN"), "read")
    try:
        yield conn
    finally:
        _rollback(conn)


def _rollback(conn: sqlite3.Connection) -> None:
    try:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    except sqlite3.Error:
        pass


def _connect(path: Path, read_only: bool, immutable: bool = False) -> sqlite3.Connection:
    if read_only:
        uri = Path(path).absolute().as_uri() + "?mode=ro" + ("&immutable=1" if immutable else "")
        return sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
    return sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)


def open_catalog(path: Path, *, read_only: bool = False) -> Database:
    """Open (creating and migrating as needed) the catalog at ``path``; ``read_only``: an
    existing one, read only (``immutable`` where SQLite cannot create the WAL's shared memory)."""
    if read_only and not Path(path).is_file():
        raise StoreError(f"cannot open the catalog {path}: it does not exist (and the store is read-only)")
    conn = None
    try:
        conn = _connect(path, read_only)
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        if read_only:
            try:
                conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
            except sqlite3.OperationalError:
                conn.close()
                conn = _connect(path, read_only, immutable=True)
                conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        else:
            retry_locked(lambda: conn.execute("PRAGMA journal_mode = WAL"), "setup")
            conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        db = Database(conn)
        if not read_only:
            migrate(db)
    except (sqlite3.Error, StoreError) as exc:
        if conn is not None:
            conn.close()
        cause = exc.__cause__ if isinstance(exc, StoreError) and exc.__cause__ else exc
        raise StoreError(f"cannot use the catalog {path}: {cause}") from exc
    return db


def migrate(db: Database) -> list[str]:
    """Apply the migrations not yet applied; return their names."""
    applied_now = []
    with write_transaction(db.conn) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at TEXT)")
        done = {row[0] for row in conn.execute("SELECT name FROM _migrations")}
        for step in MIGRATIONS:
            if step.__name__ not in done:
                step(db)
                conn.execute("INSERT INTO _migrations VALUES (?, ?)", (step.__name__, utc_now()))
                applied_now.append(step.__name__)
    return applied_now


class SqliteCatalog:
    """The embedded catalog backend: one SQLite file in the store folder.

    The store talks to a catalog through this small surface (``query``, ``execute``,
    ``write``, ``read``, ``version``, ``integrity_problems``), which the PostgreSQL backend
    (:mod:`skillgraft.store.catalog_postgres`) provides too.
    """

    dialect = "sqlite"
    errors: tuple[type[BaseException], ...] = (sqlite3.Error,)

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = Path(path)
        self.where = str(self.path)
        self.db = open_catalog(self.path, read_only=read_only)
        self._lock = threading.RLock()  # one connection (shared by threads): one transaction at a time

    def query(self, sql: str, params: Iterable = ()) -> list[dict]:
        with self._lock:
            return list(self.db.query(sql, list(params)))

    def execute(self, sql: str, params: Iterable = ()):
        with self._lock:
            return self.db.execute(sql, list(params))

    @contextmanager
    def write(self, *, relaxed: bool = False):
        """A write transaction; the object it yields has ``execute`` and ``executemany``.
        ``relaxed``: rows nothing else depends on (the ledger's), committed without waiting for
        the disk (a crash of the process loses none of them, a power cut the last few at most)."""
        with self._lock:
            conn = self.db.conn
            relaxed = relaxed and not conn.in_transaction  # refused there: BEGIN says why (StoreError)
            if relaxed:
                retry_locked(lambda: conn.execute("PRAGMA synchronous = NORMAL"), "write")
            try:
                with write_transaction(conn):
                    yield conn
            finally:
                if relaxed:
                    conn.execute("PRAGMA synchronous = FULL")

    @contextmanager
    def read(self):
        with self._lock, read_transaction(self.db.conn) as conn:
            yield conn

    def version(self) -> Optional[tuple[str, int]]:
        """``(catalog_id, version)``, or None for a catalog older than the counter."""
        try:
            with self._lock:
                row = self.db.execute("SELECT catalog_id, version FROM catalog_state WHERE id = 1").fetchone()
        except sqlite3.OperationalError:
            return None  # a catalog older than the counter, opened read-only
        return (row[0], row[1]) if row else None

    def integrity_problems(self) -> list[str]:
        try:
            with self._lock:
                messages = [str(row[0]) for row in self.db.execute("PRAGMA integrity_check").fetchall()]
        except sqlite3.Error as exc:
            messages = [str(exc)]
        return [] if messages == ["ok"] else messages

    def close(self) -> None:
        self.db.conn.close()
