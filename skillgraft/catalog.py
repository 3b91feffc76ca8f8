"""The SQLite catalog: connection, numbered migrations and write transactions.

The catalog (``catalog.db``, WAL mode) is the store's source of truth. Several processes
may write at once: every write runs in a ``BEGIN IMMEDIATE`` transaction with a long busy
timeout, and a locked database is retried with backoff, so "database is locked" never
reaches the user unless the lock is held for minutes.
"""

from __future__ import annotations

import random
import sqlite3
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator

from sqlite_utils import Database

from .errors import StoreError

BUSY_TIMEOUT_S = 60.0
LOCK_RETRY_S = 300.0

Migration = Callable[[Database], None]
MIGRATIONS: list[Migration] = []


def migration(function: Migration) -> Migration:
    """Register a migration; they run in the order they are defined, once each."""
    MIGRATIONS.append(function)
    return function


@migration
def m001_create_blocks(db: Database) -> None:
    db["blocks"].create(
        {
            "id": str,
            "sha256": str,
            "name": str,
            "kind": str,
            "description": str,
            "source": str,
            "tokens": bytes,
            "tokens_sha256": str,
            "n_tokens": int,
            "n_bytes": int,
            "fingerprint_id": str,
            "created_at": str,
            "status": str,
            "question": str,
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
        except sqlite3.OperationalError as exc:
            if not _is_locked(exc) or time.monotonic() > deadline:
                raise StoreError(f"catalog {what} failed: {exc}") from exc
            time.sleep(delay * (1 + random.random()))
            delay = min(delay * 2, 1.0)


@contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back on error; waits out other writers."""
    retry_locked(lambda: conn.execute("BEGIN IMMEDIATE"), "lock")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    else:
        retry_locked(lambda: conn.execute("COMMIT"), "commit")


def open_catalog(path: Path) -> Database:
    """Open (creating and migrating as needed) the catalog at ``path``."""
    try:
        conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open the catalog {path}: {exc}") from exc
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        retry_locked(lambda: conn.execute("PRAGMA journal_mode = WAL"), "setup")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        db = Database(conn)
        migrate(db)
    except sqlite3.Error as exc:
        conn.close()
        raise StoreError(f"cannot use the catalog {path}: {exc}") from exc
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
