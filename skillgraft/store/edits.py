"""The catalog edits of a :class:`~skillgraft.store.block_store.BlockStore` beyond deposits.

Routing keys, the ledger, settings, and the edits the memory verbs make (rename, describe,
replace). A mixin of ``BlockStore``, which provides the reads (:mod:`skillgraft.store.reads`);
every write runs in one catalog write transaction, whichever backend holds the catalog.
"""

from __future__ import annotations

import logging
from typing import Iterable, Optional

from ..core.blocks import Block, block_id_for, text_block, tokens_sha256
from .catalog import migration, utc_now
from ..errors import BlockIntegrityError, BlockNotFoundError, InputError, NameTakenError, StoreError
from ..core.hashing import blake3_hex
from .ledger import LedgerEvent
from .protocols import BlockStorage, Catalog
from ..core.states import KVState, sha256_hex

__all__ = ["CatalogEdits"]

logger = logging.getLogger("skillgraft.store")


@migration
def m025_index_routing_keys_by_block_and_kind(db) -> None:
    """Find a block's keys of a kind by an index of both: with the block's and the encoder's
    indexes alone, SQLite's planner took the encoder's (every key has the same one), so each key
    an import stored scanned every key of the catalog, and imports slowed as it grew."""
    db.execute("CREATE INDEX idx_routing_keys_block_id_kind ON routing_keys (block_id, kind)")


class CatalogEdits:
    """Routing keys, ledger, settings and block edits; mixed into ``BlockStore``."""

    catalog: Catalog
    storage: BlockStorage

    # -- text blocks -----------------------------------------------------------------------

    def put_text(self, source: str, *, name: str, description: str = "") -> tuple[Block, bool]:
        """Store a text block of ``source`` (a skill's part: no state, its cells are made on first
        use); return ``(block, created)``. The same text is stored once."""
        return self.put_texts([(source, name, description)])[0]

    def put_texts(self, texts: Iterable[tuple[str, str, str]]) -> list[tuple[Block, bool]]:
        """:meth:`put_text` of each ``(source, name, description)``, in one transaction."""
        blocks = []
        for source, name, description in texts:
            self._require_writable(f"store the text block {name!r}")
            if not name or not name.strip():
                raise InputError("a block needs a non-empty name")
            if not source.strip() or "\x00" in source:
                raise InputError(f"text block {name!r} needs non-empty text without NUL bytes")
            blocks.append(text_block(source, name=name.strip(), description=description, created_at=utc_now()))
        out: list[tuple[Block, bool]] = []
        with self.catalog.write() as conn:
            for block in blocks:
                existing = self._rows("id = ?", [block.id])
                if existing:
                    out.append((existing[0], False))
                    continue
                clash = self._rows("name = ?", [block.name])
                if clash:
                    raise StoreError(f"the name {block.name!r} is taken by block {clash[0].id}: remove it first")
                row = block.to_row()
                conn.execute(f"INSERT INTO blocks ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})",
                             list(row.values()))
                out.append((block, True))
        return out

    # -- routing keys ----------------------------------------------------------------------

    def add_routing_keys(self, block_id: str, keys: Iterable[dict]) -> int:
        """Insert routing keys ``{kind, text, embedder, vector}`` for a block; skip exact repeats."""
        self._require_writable(f"add routing keys to block {block_id}")
        with self.catalog.write() as conn:
            return self._insert_keys(conn, block_id, keys)

    def add_routing_keys_of(self, keys: dict[str, list]) -> int:
        """:meth:`add_routing_keys` for several blocks, ``{block_id: keys}``, in one transaction."""
        self._require_writable(f"add routing keys to {len(keys)} blocks")
        with self.catalog.write() as conn:
            return sum(self._insert_keys(conn, block_id, rows) for block_id, rows in keys.items())

    def set_routing_keys(self, block_id: str, kind: str, keys: Iterable[dict]) -> int:
        """Replace a block's routing keys of ``kind`` by ``keys``, in one transaction."""
        self._require_writable(f"change the keys of block {block_id}")
        with self.catalog.write() as conn:
            conn.execute("DELETE FROM routing_keys WHERE block_id = ? AND kind = ?", (block_id, kind))
            return self._insert_keys(conn, block_id, [k for k in keys if k["kind"] == kind])

    def replace_routing_keys(self, block_id: str, kinds: Iterable[str], keys: Iterable[dict]) -> int:
        """Replace a block's routing keys of every kind in ``kinds`` by ``keys`` (of those kinds),
        in one transaction; keys of other kinds (corrections) stay."""
        kinds = sorted(set(kinds))
        self._require_writable(f"change the keys of block {block_id}")
        with self.catalog.write() as conn:
            for kind in kinds:
                conn.execute("DELETE FROM routing_keys WHERE block_id = ? AND kind = ?", (block_id, kind))
            return self._insert_keys(conn, block_id, [k for k in keys if k["kind"] in kinds])

    def _insert_keys(self, conn, block_id: str, keys: Iterable[dict]) -> int:
        """Insert keys not yet stored; keys of another embedder than the recorded one are refused."""
        keys = list(keys)
        self._check_embedder(conn, keys)
        added = 0
        for key in keys:
            seen = conn.execute(
                "SELECT 1 FROM routing_keys WHERE block_id = ? AND kind = ? AND text = ? AND embedder = ?",
                (block_id, key["kind"], key["text"], key["embedder"]),
            ).fetchone()
            if not seen:
                conn.execute(
                    "INSERT INTO routing_keys (block_id, kind, text, embedder, vector, created_at, created_by)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (block_id, key["kind"], key["text"], key["embedder"], key["vector"],
                     key.get("created_at"), key.get("created_by")),
                )
                added += 1
        return added

    def set_routing_vectors(self, rows: list[dict], version: str) -> Optional[str]:
        """Store re-embedded vectors ``{id, embedder, vector}``; the catalog version after, if
        nothing else changed the catalog since ``version`` (else None)."""
        self._require_writable("re-embed routing keys")
        with self.catalog.write() as conn:
            self._check_embedder(conn, rows)
            unchanged = self.catalog_version() == version
            for row in rows:
                conn.execute(
                    "UPDATE routing_keys SET embedder = ?, vector = ? WHERE id = ?",
                    (row["embedder"], row["vector"], row["id"]),
                )
            return self.catalog_version() if unchanged else None

    def delete_routing_keys_by_id(self, key_ids: Iterable[int]) -> None:
        """Delete routing keys by their row ids, in one transaction."""
        self._require_writable("delete routing keys")
        with self.catalog.write() as conn:
            conn.executemany("DELETE FROM routing_keys WHERE id = ?", [(key_id,) for key_id in key_ids])

    def clear_routing_vectors(self, key_ids: Iterable[int]) -> None:
        """Drop the vectors of routing keys (by row id): re-embedded from their text on the next route."""
        self._require_writable("drop routing vectors")
        with self.catalog.write() as conn:
            conn.executemany("UPDATE routing_keys SET vector = NULL WHERE id = ?", [(key_id,) for key_id in key_ids])

    def delete_routing_keys(self, block_id: str, *, kind: str) -> None:
        self._require_writable(f"change the keys of block {block_id}")
        with self.catalog.write() as conn:
            conn.execute("DELETE FROM routing_keys WHERE block_id = ? AND kind = ?", (block_id, kind))

    # -- ledger and settings ---------------------------------------------------------------

    def log(self, event: LedgerEvent) -> None:
        """Append one row to the ledger (skipped, not refused, in a read-only store): a relaxed
        write, so an answer never waits for the disk to record it."""
        if self.read_only:
            logger.debug("read-only store: ledger row %r not written", event.event)
            return
        row = event.row(utc_now())
        columns = ", ".join(row)
        with self.catalog.write(relaxed=True) as conn:
            conn.execute(f"INSERT INTO ledger ({columns}) VALUES ({', '.join('?' for _ in row)})", list(row.values()))

    def set_setting(self, key: str, value: str) -> None:
        self._require_writable(f"change the setting {key}")
        with self.catalog.write() as conn:
            conn.execute("INSERT OR REPLACE INTO settings (key, value) VALUES (?, ?)", (key, value))

    # -- edits the memory verbs make -------------------------------------------------------

    def rename(self, block_id: str, new_name: str) -> Block:
        """Give a block a new name, or raise :class:`NameTakenError`."""
        self._require_writable(f"rename block {block_id}")
        with self.catalog.write() as conn:
            clash = conn.execute("SELECT id FROM blocks WHERE name = ? AND id != ?", (new_name, block_id)).fetchone()
            if clash:
                raise NameTakenError(new_name, clash[0])
            conn.execute("UPDATE blocks SET name = ? WHERE id = ?", (new_name, block_id))
        return self._by_id(block_id)

    def set_description(self, block_id: str, description: str, keys: Optional[list[dict]] = None) -> Block:
        """Set a block's description and, when given, replace its description keys by ``keys``."""
        self._require_writable(f"describe block {block_id}")
        with self.catalog.write() as conn:
            conn.execute("UPDATE blocks SET description = ? WHERE id = ?", (description, block_id))
            if keys is not None:
                conn.execute("DELETE FROM routing_keys WHERE block_id = ? AND kind = 'description'", (block_id,))
                self._insert_keys(conn, block_id, [k for k in keys if k["kind"] == "description"])
        return self._by_id(block_id)

    def replace(
        self, old: Block, state: Optional[KVState], *, source: str, keys: Optional[dict[str, list[dict]]] = None
    ) -> Block:
        """Swap ``old`` for a new capture in one transaction, keeping its name, kind, answer and keys;
        with ``state`` None the new block is a text block of ``source`` (its cells made on first use).

        ``keys`` maps a kind to the rows (as :meth:`add_routing_keys` takes) that replace the
        kept keys of that kind, in the same transaction. A process killed at any moment leaves
        either the old block with its keys or the new one with its new keys. The derived
        states kept behind ``old`` go with it.
        """
        self._require_writable(f"replace block {old.id}")
        new = _recaptured(old, state, source)
        kept = self._kept_as_it_is(old, new, state)
        if kept is not None:
            return kept
        staged = self.storage.stage(new, state.payload) if state is not None else None
        try:
            with self.catalog.write() as conn:
                _check_replaceable(conn, old, new)
                if state is not None:
                    self.storage.commit(new, staged)
                    self._insert_fingerprint(conn, state.fingerprint)
                self._swap_rows(conn, old, new, keys)
        finally:
            if staged is not None:
                self.storage.release(staged)
        self.evict(old.sha256)
        if new.id != old.id:
            from .shared_derived import drop_block_states

            drop_block_states(self, old.id)
        return new

    def _kept_as_it_is(self, old: Block, new: Block, state: Optional[KVState]) -> Optional[Block]:
        """``old`` when its recapture ``new`` is the same block with its payload in place
        (re-labelled when only the runtime differs); None when the two must be swapped."""
        if new.id != old.id:
            return None
        if state is None:
            return old
        if old.status != "ok" or not self.storage.has(old):
            return None
        if old.fingerprint_id == new.fingerprint_id:
            return old
        # The same bytes under another runtime: re-label.
        with self.catalog.write() as conn:
            self._insert_fingerprint(conn, state.fingerprint)
            conn.execute("UPDATE blocks SET fingerprint_id = ? WHERE id = ?", (new.fingerprint_id, old.id))
        return self._by_id(old.id)

    def _swap_rows(self, conn, old: Block, new: Block, keys: Optional[dict[str, list[dict]]]) -> None:
        """In the open transaction: ``new``'s row in place of ``old``'s, which hands over its keys
        and skills (the kinds in ``keys`` replaced) and goes, with its payload unless shared."""
        conn.execute("UPDATE blocks SET name = ? WHERE id = ?", (f"{old.name}\x1freplaced-{old.id}", old.id))
        row = new.to_row()
        conn.execute(
            f"INSERT OR REPLACE INTO blocks ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})",
            list(row.values()),
        )
        if new.id != old.id:
            conn.execute("UPDATE routing_keys SET block_id = ? WHERE block_id = ?", (new.id, old.id))
            conn.execute("UPDATE skill_blocks SET block_id = ? WHERE block_id = ?", (new.id, old.id))
        for kind, rows in (keys or {}).items():
            conn.execute("DELETE FROM routing_keys WHERE block_id = ? AND kind = ?", (new.id, kind))
            self._insert_keys(conn, new.id, [k for k in rows if k["kind"] == kind])
        if new.id != old.id:
            conn.execute("DELETE FROM blocks WHERE id = ?", (old.id,))
            shared = conn.execute("SELECT 1 FROM blocks WHERE sha256 = ?", (old.sha256,)).fetchone()
            if not shared and not old.text_only:
                self.storage.delete(old)


def _recaptured(old: Block, state: Optional[KVState], source: str) -> Block:
    """``old``'s recapture: a text block of ``source`` with ``state`` None, else ``state``'s
    (its payload checked against its SHA-256); name, kind, answer and the like kept."""
    kept = old.model_dump(
        exclude={"id", "sha256", "source", "tokens", "tokens_sha256", "n_tokens", "n_bytes",
                 "fingerprint_id", "created_at", "status", "blake3"}
    )
    if state is None:
        return text_block(source, created_at=utc_now(), **kept)
    if sha256_hex(state.payload) != state.sha256:
        raise BlockIntegrityError(f"block {old.id} ({old.name}): the new payload does not match its SHA-256")
    return Block(
        id=block_id_for(state.sha256), sha256=state.sha256, source=source, tokens=state.tokens,
        tokens_sha256=tokens_sha256(state.tokens), n_tokens=state.n_tokens, n_bytes=state.n_bytes,
        fingerprint_id=state.fingerprint.id, created_at=utc_now(), blake3=blake3_hex(state.payload), **kept,
    )


def _check_replaceable(conn, old: Block, new: Block) -> None:
    """In the open transaction: ``old`` is still there under its name, and ``new`` is no other block."""
    if not conn.execute("SELECT 1 FROM blocks WHERE id = ? AND name = ?", (old.id, old.name)).fetchone():
        raise BlockNotFoundError(
            f"block {old.id} ({old.name}) was replaced, renamed or removed by another writer meanwhile: "
            "nothing was changed; read it again and retry"
        )
    taken = conn.execute("SELECT id FROM blocks WHERE id = ? AND id != ?", (new.id, old.id)).fetchone()
    if taken:
        raise StoreError(f"block {old.id} ({old.name}) recaptures as {new.id}, which the store already holds")
