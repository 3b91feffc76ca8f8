"""The catalog reads of a :class:`~skillgraft.store.block_store.BlockStore`.

Blocks (by id, name, prefix, tokens or question), fingerprints, routing keys, settings and
the catalog version; the ledger's reads are :class:`~skillgraft.store.ledger.LedgerReads`.
A mixin of ``BlockStore``, which provides ``catalog``; whichever backend holds the catalog,
a damaged one raises :class:`StoreError`, never the driver's errors.
"""

from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager
from typing import Iterable, Iterator, Optional

from ..core.blocks import TEXT_RUNTIME, Block, BlockKind, block_id_for, text_sha256, tokens_sha256
from ..core.fingerprint import RuntimeFingerprint
from ..core.sha import HEX
from ..errors import BlockNotFoundError, InputError, StoreError
from .protocols import Catalog

__all__ = ["CatalogReads", "MIN_PREFIX"]

MIN_PREFIX = 4


class CatalogReads:
    """Reading blocks, fingerprints, routing keys and settings; mixed into ``BlockStore``."""

    catalog: Catalog

    def _select(self, sql: str, params: Iterable = ()) -> list[dict]:
        """Rows of a query; a damaged catalog raises :class:`StoreError`, never the driver's errors."""
        try:
            return self.catalog.query(sql, list(params))
        except self.catalog.errors as exc:
            raise StoreError(f"cannot read the catalog {self.catalog.where}: {exc}; run `skillgraft check`") from exc

    # -- blocks ----------------------------------------------------------------------------

    def block_rows(self) -> list[dict]:
        """Every block row as stored, oldest first, parsed or not (see :meth:`block_from_row`)."""
        return self._select("SELECT * FROM blocks ORDER BY created_at, id")

    @staticmethod
    def block_from_row(row: dict) -> Block:
        """The block a catalog row holds; an invalid row raises :class:`StoreError`."""
        try:
            return Block.from_row(row)
        except (ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
            detail = str(exc).splitlines()[0][:200]
            raise StoreError(f"catalog row {str(row.get('id'))[:40]!r} is invalid ({detail}); run `skillgraft check`") from None

    def _rows(self, where: str = "", params: Iterable = ()) -> list[Block]:
        sql = "SELECT * FROM blocks" + (f" WHERE {where}" if where else "") + " ORDER BY created_at, id"
        return [self.block_from_row(row) for row in self._select(sql, params)]

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads inside the block all see one consistent state of the catalog."""
        try:
            with self.catalog.read():
                yield
        except self.catalog.errors as exc:
            raise StoreError(f"cannot read the catalog {self.catalog.where}: {exc}") from exc

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

    def _by_id(self, block_id: str) -> Block:
        found = self._rows("id = ?", [block_id])
        if not found:
            raise BlockNotFoundError(f"no block with id {block_id!r}")
        return found[0]

    def find_same(self, tokens: Iterable[int], fingerprint_id: str) -> Optional[Block]:
        """The block holding exactly these tokens under this runtime, if any."""
        found = self._rows("tokens_sha256 = ? AND fingerprint_id = ?", [tokens_sha256(tokens), fingerprint_id])
        return found[0] if found else None

    def find_text(self, text: str) -> Optional[Block]:
        """The text block holding exactly ``text``, if any."""
        sha256 = text_sha256(text)
        found = self._rows("id = ?", [block_id_for(sha256)])
        return found[0] if found and found[0].sha256 == sha256 else None

    def state_rows(self, fingerprint_id: str) -> list[dict]:
        """``id, sha256, tokens, tokens_sha256, n_tokens, expires_at`` of the healthy blocks
        captured under ``fingerprint_id``, oldest first, as stored (no texts): whoever reads
        them checks them."""
        return self._select("SELECT id, sha256, tokens, tokens_sha256, n_tokens, expires_at FROM blocks"
                            " WHERE fingerprint_id = ? AND status = 'ok' ORDER BY created_at, id", [fingerprint_id])

    def solutions_for(self, question_key: str) -> list[Block]:
        """Healthy solution blocks whose normalized question is ``question_key`` (none for an
        empty key: a question of nothing visible never recurs)."""
        if not question_key:
            return []
        return self._rows("kind = 'solution' AND status = 'ok' AND question_key = ?", [question_key])

    # -- fingerprints ----------------------------------------------------------------------

    def fingerprint(self, fingerprint_id: str) -> RuntimeFingerprint:
        rows = self._select("SELECT data FROM fingerprints WHERE id = ?", [fingerprint_id])
        if not rows:
            raise StoreError(f"fingerprint {fingerprint_id} is missing from the catalog")
        try:
            return RuntimeFingerprint.model_validate_json(rows[0]["data"])
        except (ValueError, TypeError) as exc:
            raise StoreError(f"fingerprint {fingerprint_id} in the catalog is invalid: {str(exc).splitlines()[0]}") from None

    def fingerprint_ids(self) -> set[str]:
        """The runtimes the healthy blocks were captured under (text blocks belong to none):
        read again only when the catalog changed (every route asks; the read scans every block)."""
        version = self.catalog_version()
        kept = getattr(self, "_fingerprints_kept", None)
        if kept is not None and kept[0] == version:
            return set(kept[1])
        rows = self._select("SELECT DISTINCT fingerprint_id FROM blocks WHERE status = 'ok'")
        ids = frozenset(row["fingerprint_id"] for row in rows) - {TEXT_RUNTIME}
        self._fingerprints_kept = (version, ids)
        return set(ids)

    # -- routing keys ----------------------------------------------------------------------

    def routing_keys(self, block_id: Optional[str] = None) -> list[dict]:
        """Routing keys of one block (or all), with their stored vectors."""
        if block_id:
            return self._select("SELECT * FROM routing_keys WHERE block_id = ? ORDER BY id", [block_id])
        return self._select("SELECT * FROM routing_keys ORDER BY id")

    def key_texts(self) -> list[dict]:
        """``{block_id, kind, text}`` of every routing key, without vectors (the lexical index's source)."""
        return self._select("SELECT block_id, kind, text FROM routing_keys ORDER BY id")

    def orphan_routing_keys(self) -> list[dict]:
        """``{id, block_id}`` of the routing keys whose block the catalog lacks."""
        return self._select("SELECT id, block_id FROM routing_keys WHERE block_id NOT IN (SELECT id FROM blocks)")

    def count_stale_keys(self, embedder: str) -> int:
        """Routing keys without a vector, or written by another embedder than ``embedder``."""
        return self._select(
            "SELECT COUNT(*) AS n FROM routing_keys WHERE embedder != ? OR vector IS NULL", [embedder]
        )[0]["n"]

    def catalog_version(self) -> str:
        """Changes whenever blocks or routing keys change: the router's cache key.

        The catalog's random id and a counter bumped by triggers on every change, so it
        never repeats, whatever the rows hold and whichever process (or host) wrote them.
        """
        try:
            row = self.catalog.version()
        except self.catalog.errors as exc:
            raise StoreError(f"cannot read the catalog {self.catalog.where}: {exc}; run `skillgraft check`") from exc
        if row:
            return f"{row[0]}:{row[1]}"
        legacy = self._select(
            "SELECT (SELECT COUNT(*) FROM blocks) AS a, (SELECT COALESCE(SUM(length(id) + n_bytes), 0) FROM blocks) AS b,"
            " (SELECT COALESCE(MAX(id), 0) FROM routing_keys) AS c, (SELECT COUNT(*) FROM routing_keys) AS d,"
            " (SELECT group_concat(id || status) FROM blocks) AS e"
        )[0]
        return "legacy:" + hashlib.sha256(json.dumps(legacy, default=str).encode()).hexdigest()[:16]

    # -- settings --------------------------------------------------------------------------

    def setting(self, key: str, default: Optional[str] = None) -> Optional[str]:
        rows = self._select("SELECT value FROM settings WHERE key = ?", [key])
        return rows[0]["value"] if rows else default
