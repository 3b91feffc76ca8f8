"""The published derived states found by key: the catalog's ``derived_keys`` table.

A published state (a ``derived_states`` row, :mod:`skillgraft.store.shared_derived`) has one
row here per whole block of its tokens: the block's chained key
(:func:`~skillgraft.kv.prefix_keys.chain_keys`, started from the runtime and the reuse scope; 32
hex digits), the runtime, the scope, the state's key and the block's depth (how many whole blocks
it stands for). Two token sequences share their first ``k`` blocks exactly when their ``k``-th
keys are equal, so the published states sharing the longest beginning with a prompt are found
with one indexed query over the prompt's own keys (:func:`find_states`): a state published on
one host is found by the others on their next request, and no host lists the rows.

The rows are written with their state (:func:`insert_keys`, in the same transaction) and go
with it (``ON DELETE CASCADE``); the migration keys the rows published before it. Like the
states' rows they are input from whoever can write the catalog: a state they lead to is used
only after its own checks (its key is its tokens' address, its payload the recorded digest), and
only for the tokens a prompt really shares with it.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from ..kv.prefix_keys import chain_keys, state_key
from .catalog import migration
from .protocols import Catalog

__all__ = ["MAX_TOKENS", "find_states", "insert_keys", "row_tokens"]

MAX_TOKENS = 1 << 17  # the longest published state (its token ids are read)
_ROWS_PER_INSERT = 150  # 5 parameters a row: within SQLite's oldest limit of 999
_KEYS_PER_QUERY = 400  # 2 parameters a key: within SQLite's oldest limit of 999
FOUND_LIMIT = 8  # the states read for one prompt: of those holding its deepest key found


@migration
def m020_create_derived_keys(db) -> None:
    """The published derived states by the chained keys of their whole blocks; the rows
    published before are keyed from their token ids (those whose ids are not their key's: not)."""
    db.execute(
        "CREATE TABLE derived_keys (block_key TEXT NOT NULL, state_key TEXT NOT NULL"
        " REFERENCES derived_states (key) ON DELETE CASCADE, fingerprint_id TEXT NOT NULL, scope TEXT NOT NULL,"
        " depth BIGINT NOT NULL, PRIMARY KEY (block_key, state_key))"
    )
    db.execute("CREATE INDEX idx_derived_keys_state_key ON derived_keys (state_key)")
    listed = db.execute("SELECT key, fingerprint_id, scope, n_tokens FROM derived_states").fetchall()
    for key, fingerprint_id, scope, n_tokens in listed:
        found = db.execute("SELECT tokens FROM derived_states WHERE key = ? AND length(tokens) <= ?",
                           [key, 4 * MAX_TOKENS]).fetchone()
        tokens = row_tokens(found[0], n_tokens) if found is not None else None
        if tokens is not None and isinstance(scope, str) and key == state_key(fingerprint_id, tokens, scope):
            insert_keys(db, key, fingerprint_id, scope, tokens)


def row_tokens(blob: object, n_tokens: object) -> Optional[tuple[int, ...]]:
    """A row's token ids (int32 little-endian): None unless there are ``n_tokens`` of them, at
    least one, none negative."""
    if not isinstance(blob, (bytes, memoryview)) or not isinstance(n_tokens, int) or len(blob) != 4 * n_tokens:
        return None
    ids = np.frombuffer(bytes(blob), dtype="<i4")
    if ids.size == 0 or (ids < 0).any():
        return None
    return tuple(int(t) for t in ids)


def insert_keys(conn, key: str, fingerprint_id: str, scope: str, tokens: Sequence[int]) -> int:
    """Write the block keys of the state ``key`` (of ``tokens`` under ``fingerprint_id`` in
    ``scope``) through ``conn`` (a catalog, or a write transaction's connection); how many."""
    blocks = chain_keys(fingerprint_id, tokens, scope)
    for start in range(0, len(blocks), _ROWS_PER_INSERT):
        chunk = blocks[start:start + _ROWS_PER_INSERT]
        params = [value for depth, block in enumerate(chunk, start + 1)
                  for value in (block.hex(), key, fingerprint_id, scope, depth)]
        conn.execute(
            "INSERT OR IGNORE INTO derived_keys (block_key, state_key, fingerprint_id, scope, depth)"
            f" VALUES {', '.join(['(?, ?, ?, ?, ?)'] * len(chunk))}", params)
    return len(blocks)


def find_states(catalog: Catalog, fingerprint_id: str, keys: Sequence[bytes]) -> list[dict]:
    """The rows (``derived_states``' columns but the times) of the published states of
    ``fingerprint_id`` (at most :data:`MAX_TOKENS` tokens) that hold the deepest of ``keys`` (a prompt's chain keys, deepest last)
    any state holds, at most :data:`FOUND_LIMIT`, most recently used first. One query: one index
    probe a key, then the states of the deepest found; of a long prompt the keys are asked for
    deepest first, a few hundred a query, until one finds."""
    for end in range(len(keys), 0, -_KEYS_PER_QUERY):
        start = max(0, end - _KEYS_PER_QUERY)
        prompt = [value for depth, key in enumerate(keys[start:end], start + 1) for value in (key.hex(), depth)]
        rows = catalog.query(
            f"WITH prompt (block_key, depth) AS (VALUES {', '.join(['(?, CAST(? AS INTEGER))'] * (end - start))})"
            " SELECT d.key, d.n_tokens, d.tokens, d.n_bytes, d.scope, d.sha256, d.parent FROM derived_keys k"
            " JOIN derived_states d ON d.key = k.state_key WHERE k.block_key = (SELECT p.block_key FROM prompt p"
            " WHERE EXISTS (SELECT 1 FROM derived_keys x WHERE x.block_key = p.block_key) ORDER BY p.depth DESC LIMIT 1)"
            " AND d.fingerprint_id = ? AND length(d.tokens) <= ? ORDER BY d.last_used DESC LIMIT ?",
            [*prompt, fingerprint_id, 4 * MAX_TOKENS, FOUND_LIMIT])
        if rows:
            return rows
    return []
