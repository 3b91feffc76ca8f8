"""The contracts a store relies on from its catalog and its block storage, as checks that run
on every implementation: the in-memory fakes, SQLite and a folder in the fast suite, PostgreSQL
and an S3-API bucket against their real servers (``tests/test_shared_store.py``).

Each check starts from a fresh, empty catalog or storage.
"""

from __future__ import annotations

import hashlib
from contextlib import nullcontext

import pytest

from skillgraft.core.blocks import Block, block_id_for, tokens_sha256
from skillgraft.errors import BlockIntegrityError, StoreError
from skillgraft.protocols import BlockStorage, Catalog
from skillgraft.store.catalog import utc_now

KEY_INSERT = "INSERT INTO routing_keys (block_id, kind, text, embedder, vector) VALUES (?, ?, ?, ?, ?)"


def sample_block(name: str, payload: bytes) -> Block:
    """A consistent catalog row for ``payload`` (its tokens are the bytes of ``name``)."""
    sha256 = hashlib.sha256(payload).hexdigest()
    tokens = tuple(name.encode())
    return Block(
        id=block_id_for(sha256), sha256=sha256, name=name, kind="manual", source=name, tokens=tokens,
        tokens_sha256=tokens_sha256(tokens), n_tokens=len(tokens), n_bytes=len(payload),
        fingerprint_id="f" * 16, created_at=utc_now(),
    )


def _count(catalog: Catalog, table: str) -> int:
    return catalog.query(f"SELECT COUNT(*) AS n FROM {table}")[0]["n"]


def _insert_block(conn, block: Block) -> None:
    row = block.to_row()
    conn.execute(
        f"INSERT OR REPLACE INTO blocks ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})", list(row.values())
    )


class Refused(Exception):
    """Raised inside a write transaction by the checks."""


def check_catalog(catalog: Catalog) -> None:
    """Migrated tables; writes committed or rolled back whole; the version bumped by every
    change to blocks and routing keys, and only by those; rows read back as written."""
    assert isinstance(catalog, Catalog) and isinstance(catalog.where, str) and catalog.errors
    for table in ("blocks", "fingerprints", "routing_keys", "ledger", "settings"):
        assert _count(catalog, table) == 0, table
    assert catalog.integrity_problems() == []
    catalog_id, start = catalog.version()

    with catalog.write() as conn:
        conn.execute("INSERT OR REPLACE INTO settings (key, value) VALUES (?, ?)", ("k", "1"))
        conn.execute("INSERT OR REPLACE INTO settings (key, value) VALUES (?, ?)", ("k", "2"))
        conn.execute("INSERT OR IGNORE INTO settings (key, value) VALUES (?, ?)", ("k", "3"))
    assert catalog.query("SELECT value FROM settings WHERE key = ?", ["k"]) == [{"value": "2"}]
    assert catalog.version() == (catalog_id, start), "a setting is not a change of blocks or keys"

    block = sample_block("contract", b"payload of the contract block")
    with catalog.write() as conn:
        _insert_block(conn, block)
        assert conn.execute("SELECT id FROM blocks WHERE name = ?", (block.name,)).fetchone()[0] == block.id
        assert conn.execute("SELECT id FROM blocks WHERE name = ?", ("nobody",)).fetchone() is None
    assert Block.from_row(catalog.query("SELECT * FROM blocks WHERE id = ?", [block.id])[0]) == block
    same_id, after_block = catalog.version()
    assert same_id == catalog_id and after_block > start

    vector = bytes(range(16))
    with catalog.write() as conn:
        conn.executemany(KEY_INSERT, [(block.id, "name", text, "e", vector) for text in ("a", "b")])
    keys = catalog.query("SELECT text, vector FROM routing_keys ORDER BY id")
    assert [(k["text"], bytes(k["vector"])) for k in keys] == [("a", vector), ("b", vector)]
    after_keys = catalog.version()[1]
    assert after_keys > after_block

    with pytest.raises(Refused):
        with catalog.write() as conn:
            conn.execute("DELETE FROM routing_keys")
            conn.execute("UPDATE settings SET value = ?", ("lost",))
            raise Refused
    assert _count(catalog, "routing_keys") == 2 and catalog.query("SELECT value FROM settings")[0]["value"] == "2"
    assert catalog.version()[1] == after_keys, "a write rolled back changes nothing"

    with pytest.raises((StoreError, *catalog.errors)):
        with catalog.write() as conn:
            conn.execute(KEY_INSERT, ("no-such-block", "name", "c", "e", None))  # a key needs its block
    with pytest.raises((StoreError, *catalog.errors)):
        catalog.query("SELECT * FROM no_such_table")
    with catalog.read():
        assert _count(catalog, "routing_keys") == 2 and _count(catalog, "blocks") == 1
    assert catalog.integrity_problems() == []


def _verified(block: Block, payload: bytes):
    return None if hashlib.sha256(payload).hexdigest() == block.sha256 else "SHA-256 mismatch"


def _put(storage: BlockStorage, block: Block, payload: bytes) -> None:
    staged = storage.stage(block, payload)
    try:
        storage.commit(block, staged)
    finally:
        storage.release(staged)


def check_block_storage(storage: BlockStorage) -> None:
    """Payloads stored and read back verified, the same problems named the same way, moved
    aside, deleted, and strays found; ``storage`` must report an unclaimed payload at once."""
    assert isinstance(storage, BlockStorage) and isinstance(storage.where, str) and storage.kind
    storage.prepare()
    payloads = {name: name.encode() * 40 for name in ("alpha", "beta", "gamma")}
    alpha, beta, gamma = (sample_block(name, payload) for name, payload in payloads.items())

    assert not storage.has(alpha) and storage.read(alpha, _verified) == (None, "file missing")
    assert storage.path_of(alpha).name == alpha.file_name
    with pytest.raises(BlockIntegrityError):
        storage.path_of(alpha.model_copy(update={"sha256": "not-a-digest"}))

    for _ in range(2):  # the same payload twice: stored once
        _put(storage, alpha, payloads["alpha"])
        assert storage.has(alpha) and storage.read(alpha, _verified) == (payloads["alpha"], None)
    assert storage.read(alpha, lambda block, payload: "BLAKE3 mismatch") == (None, "BLAKE3 mismatch")
    assert storage.read(alpha, _verified) == (payloads["alpha"], None)

    _put(storage, beta, b"short")  # bytes of another size under beta's name
    assert storage.read(beta, _verified) == (None, f"5 bytes, expected {beta.n_bytes}")

    known = {alpha.file_name, beta.file_name}
    assert storage.strays(known, False, nullcontext) == ([], [])
    problems, repaired = storage.strays({alpha.file_name}, False, nullcontext)
    assert [(p["block_id"], p["file"]) for p in problems] == [(None, beta.file_name)] and repaired == []
    problems, repaired = storage.strays({alpha.file_name}, True, nullcontext)
    assert problems == [] and [r["file"] for r in repaired] == [beta.file_name] and repaired[0]["action"]
    assert storage.read(beta, _verified) == (None, "file missing")

    assert storage.quarantine(alpha) is not None
    assert not storage.has(alpha) and storage.read(alpha, _verified) == (None, "file missing")
    assert storage.quarantine(alpha) is None

    _put(storage, gamma, payloads["gamma"])
    assert storage.delete(gamma) == "deleted" and not storage.has(gamma)
    assert storage.delete(gamma) in ("already gone", "deleted")  # S3 deletes a missing key without a word
    assert storage.strays(set(), False, nullcontext) == ([], []), "what was moved aside is no stray"
