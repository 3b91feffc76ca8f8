"""The catalog side of routing that learns: the encoder record, staged re-embeds, corrections.

A mixin of :class:`~skillgraft.store.block_store.BlockStore`; each write is one catalog write
transaction, on SQLite or PostgreSQL alike.

- **The encoder record** (setting ``router.encoder``, JSON: name, spec, dimension, digest)
  says which text encoder made the store's vectors. It is claimed by the first writer of
  keys and changed only by :meth:`switch_vectors`; a key whose embedder is not the recorded
  one is refused inside the transaction that would insert it.
- **Staged vectors** (table ``staged_vectors``): a re-embed writes the other encoder's
  vectors there, batch by batch, without touching the routing keys; :meth:`switch_vectors`
  then swaps every key's vector and the record in one transaction, or does nothing when a
  key is still unstaged. A re-embed killed at any point leaves the store as it was.
- **Corrections** are routing keys with an origin (``created_at``, ``created_by``): kind
  ``feedback`` (a query that belongs to its block) or kind ``negative`` (a query no block
  fits; no block id).
"""

from __future__ import annotations

import hashlib
import json
from typing import Iterable, Optional

from ..errors import EncoderMismatchError, InputError, StoreError
from .catalog import utc_now

__all__ = ["ENCODER_SETTING", "CORRECTION_KINDS", "RoutingEdits"]

ENCODER_SETTING = "router.encoder"
CORRECTION_KINDS = ("feedback", "negative")


class RoutingEdits:
    """The encoder record, staged vectors and corrections; mixed into ``BlockStore``."""

    # -- the encoder record ------------------------------------------------------------------

    def encoder_record(self) -> Optional[dict]:
        """The recorded encoder of the store's vectors, or None when none is recorded."""
        return _parse_record(self.setting(ENCODER_SETTING))

    def key_embedders(self) -> dict[str, int]:
        """How many routing keys each embedder name wrote (for stores older than the record)."""
        rows = self._select("SELECT embedder, COUNT(*) AS n FROM routing_keys GROUP BY embedder")
        return {row["embedder"]: int(row["n"]) for row in rows if row["embedder"] is not None}

    def claim_encoder(self, record: dict) -> dict:
        """Record ``record`` as the store's encoder unless one is recorded; return the one in force."""
        self._require_writable("record its text encoder")
        with self.catalog.write() as conn:
            row = conn.execute("SELECT value FROM settings WHERE key = ?", (ENCODER_SETTING,)).fetchone()
            stored = _parse_record(row[0]) if row else None
            if stored is not None:
                return stored
            conn.execute(
                "INSERT OR REPLACE INTO settings (key, value) VALUES (?, ?)", (ENCODER_SETTING, json.dumps(record))
            )
        return record

    @staticmethod
    def _check_embedder(conn, keys: list[dict]) -> None:
        """Refuse keys of another embedder than the recorded one (checked inside the write)."""
        row = conn.execute("SELECT value FROM settings WHERE key = ?", (ENCODER_SETTING,)).fetchone()
        stored = _parse_record(row[0]) if row else None
        if stored is None:
            return
        for key in keys:
            if key["embedder"] != stored["name"]:
                raise EncoderMismatchError(stored, {"name": key["embedder"]})

    # -- staged re-embeds --------------------------------------------------------------------

    def unstaged_keys(self, embedder: str, limit: int = 1_000) -> list[dict]:
        """Up to ``limit`` keys ``{id, text}`` with no vector of ``embedder`` (a :func:`stage_key`)
        staged for their text."""
        return self._select(
            "SELECT r.id, r.text FROM routing_keys r WHERE NOT EXISTS (SELECT 1 FROM staged_vectors s"
            " WHERE s.key_id = r.id AND s.embedder = ? AND s.text = r.text) ORDER BY r.id LIMIT ?",
            [embedder, limit],
        )

    def stage_vectors(self, embedder: str, rows: Iterable[dict]) -> int:
        """Stage ``{id, text, vector}`` rows as ``embedder``'s vectors (``embedder``: the
        :func:`stage_key` of its whole record); the routing keys are untouched."""
        self._require_writable("stage re-embedded vectors")
        rows = list(rows)
        with self.catalog.write() as conn:
            for row in rows:
                conn.execute("DELETE FROM staged_vectors WHERE key_id = ? AND embedder = ?", (row["id"], embedder))
                conn.execute(
                    "INSERT INTO staged_vectors (key_id, embedder, text, vector) VALUES (?, ?, ?, ?)",
                    (row["id"], embedder, row["text"], row["vector"]),
                )
        return len(rows)

    def switch_vectors(self, record: dict) -> Optional[int]:
        """Give every key its staged vector of ``record``'s encoder and record it, in one
        transaction; the number of keys switched, or None (nothing changed) while a key has no
        staged vector (a writer added it meanwhile: stage it and call again)."""
        self._require_writable("switch its routing vectors")
        name, staged = record["name"], stage_key(record)
        with self.catalog.write() as conn:
            missing = conn.execute(
                "SELECT COUNT(*) FROM routing_keys r WHERE NOT EXISTS (SELECT 1 FROM staged_vectors s"
                " WHERE s.key_id = r.id AND s.embedder = ? AND s.text = r.text)", (staged,),
            ).fetchone()[0]
            if missing:
                return None
            dimension = record.get("dimension")
            if isinstance(dimension, int):
                odd = conn.execute(
                    "SELECT COUNT(*) FROM staged_vectors WHERE embedder = ? AND length(vector) != ?", (staged, dimension * 4),
                ).fetchone()[0]
                if odd:
                    raise StoreError(f"{odd} staged vectors are not {dimension}-d float32 as {name!r} records; "
                                     "nothing was switched (run the re-embed again)")
            switched = conn.execute("SELECT COUNT(*) FROM routing_keys").fetchone()[0]
            conn.execute(
                "UPDATE routing_keys SET embedder = ?, vector = (SELECT s.vector FROM staged_vectors s"
                " WHERE s.key_id = routing_keys.id AND s.embedder = ? AND s.text = routing_keys.text)",
                (name, staged),
            )
            conn.execute("DELETE FROM staged_vectors")
            conn.execute(
                "INSERT OR REPLACE INTO settings (key, value) VALUES (?, ?)", (ENCODER_SETTING, json.dumps(record))
            )
        return int(switched)

    def staged_count(self) -> int:
        """Vectors staged by a re-embed that has not switched (yet, or ever)."""
        return int(self._select("SELECT COUNT(*) AS n FROM staged_vectors")[0]["n"])

    # -- corrections -------------------------------------------------------------------------

    def add_correction(self, key: dict, block_id: Optional[str], by: str, limit: int, at: Optional[str] = None) -> dict:
        """Store a correction ``{kind, text, embedder, vector}`` (a ``feedback`` key of
        ``block_id``, or a ``negative`` with no block), replacing any correction of the same
        text, in one transaction; the stored row. :class:`InputError` past ``limit`` corrections."""
        self._require_writable("record a routing correction")
        if key["kind"] not in CORRECTION_KINDS or (block_id is None) != (key["kind"] == "negative"):
            raise InputError(f"a correction is a feedback key of a block or a negative, got {key['kind']!r}")
        at = at or utc_now()
        with self.catalog.write() as conn:
            self._check_embedder(conn, [key])
            if block_id is not None and not conn.execute("SELECT 1 FROM blocks WHERE id = ?", (block_id,)).fetchone():
                raise StoreError(f"block {block_id} was removed meanwhile: the correction was not stored")
            conn.execute(
                "DELETE FROM routing_keys WHERE kind IN ('feedback', 'negative') AND text = ?", (key["text"],)
            )
            count = conn.execute("SELECT COUNT(*) FROM routing_keys WHERE kind IN ('feedback', 'negative')").fetchone()[0]
            if count >= limit:
                raise InputError(
                    f"the store holds {count} routing corrections (at most {limit}): remove some with `skillgraft feedback rm`"
                )
            conn.execute(
                "INSERT INTO routing_keys (block_id, kind, text, embedder, vector, created_at, created_by)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (block_id, key["kind"], key["text"], key["embedder"], key["vector"], at, by),
            )
            row = conn.execute(
                "SELECT id FROM routing_keys WHERE kind = ? AND text = ? ORDER BY id DESC LIMIT 1", (key["kind"], key["text"])
            ).fetchone()
        return {"id": int(row[0]), "block_id": block_id, "kind": key["kind"], "text": key["text"],
                "created_at": at, "created_by": by}

    def corrections(self) -> list[dict]:
        """Every correction, oldest first: ``{id, kind, block_id, text, created_at, created_by}``."""
        return self._select(
            "SELECT id, kind, block_id, text, created_at, created_by FROM routing_keys"
            " WHERE kind IN ('feedback', 'negative') ORDER BY id"
        )

    def remove_correction(self, key_id: int) -> dict:
        """Delete one correction by its id; :class:`InputError` when no correction has it."""
        self._require_writable(f"remove correction {key_id}")
        if not -(1 << 63) <= key_id < 1 << 63:  # past SQLite's integers no row has it (and binding it overflows)
            raise InputError(f"no routing correction with id {key_id} (see `skillgraft feedback list`)")
        with self.catalog.write() as conn:
            row = conn.execute(
                "SELECT id, kind, block_id, text, created_at, created_by FROM routing_keys"
                " WHERE id = ? AND kind IN ('feedback', 'negative')", (key_id,),
            ).fetchone()
            if row is None:
                raise InputError(f"no routing correction with id {key_id} (see `skillgraft feedback list`)")
            conn.execute("DELETE FROM routing_keys WHERE id = ?", (key_id,))
        return dict(zip(("id", "kind", "block_id", "text", "created_at", "created_by"), row))

    def negative_vectors(self) -> list[bytes]:
        """The stored vectors of the negatives (queries no block fits)."""
        rows = self._select("SELECT vector FROM routing_keys WHERE kind = 'negative' AND block_id IS NULL ORDER BY id")
        return [row["vector"] for row in rows]

    def key_vectors(self, kind: str) -> list[dict]:
        """``{block_id, vector}`` of every routing key of ``kind`` (a block's keys, in order)."""
        return self._select("SELECT block_id, vector FROM routing_keys WHERE kind = ? ORDER BY id", [kind])


def stage_key(record: dict) -> str:
    """What a re-embed stages its vectors under: the encoder's name and a digest of its whole
    record (spec, dimension, weights or model id), so a re-embed resumed with another encoder
    of the same name (another endpoint, another dimension) never reuses what the first staged."""
    digest = hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return f"{record['name']}#{digest}"


def _parse_record(value: Optional[str]) -> Optional[dict]:
    if value is None:
        return None
    try:
        record = json.loads(value)
    except ValueError:
        record = None
    if not isinstance(record, dict) or not isinstance(record.get("name"), str):
        raise StoreError(f"the catalog's {ENCODER_SETTING} setting is damaged: {value[:80]!r}; run `skillgraft reembed`")
    return record
