"""Ledger events: one typed row per recall, generation, deposit, import, solve or routing correction.

The ledger's columns are fixed here, so no caller's keyword ever becomes a column name in
SQL; ``timings`` and ``detail`` are stored as JSON text. Rows are read back typed
(:class:`LedgerRow`, :class:`BlockUse`) through :class:`LedgerReads`, a part of the store.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal, Optional

LedgerKind = Literal["recall", "generate", "deposit", "import", "solve", "feedback"]


@dataclass(frozen=True)
class LedgerEvent:
    """One ledger row, without its id and time (the store adds them)."""

    event: LedgerKind
    decision: Optional[str] = None
    block_id: Optional[str] = None
    query_sha256: Optional[str] = None
    score: Optional[float] = None
    threshold: Optional[float] = None
    decoded_tokens: Optional[int] = None
    prefill_tokens_avoided: Optional[int] = None
    timings: dict = field(default_factory=dict)
    detail: Optional[dict] = None

    def row(self, at: str) -> dict:
        """The catalog row: fixed columns, JSON text for ``timings`` and ``detail``."""
        return {
            "at": at,
            "event": self.event,
            "decision": self.decision,
            "block_id": self.block_id,
            "query_sha256": self.query_sha256,
            "score": None if self.score is None else float(self.score),
            "threshold": None if self.threshold is None else float(self.threshold),
            "decoded_tokens": self.decoded_tokens,
            "prefill_tokens_avoided": self.prefill_tokens_avoided,
            "timings": json.dumps(self.timings, default=str),
            "detail": None if self.detail is None else json.dumps(self.detail, default=str),
        }


def _json_column(text: Optional[str]) -> Optional[dict]:
    """A JSON text column as a dict; None when empty or not a JSON object (a damaged row still reads)."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


@dataclass(frozen=True, kw_only=True)
class LedgerRow(LedgerEvent):
    """One ledger row as read back: its event, id and time, the JSON columns decoded (a damaged
    one reads as empty)."""

    id: int
    at: str

    @classmethod
    def from_row(cls, row: dict) -> "LedgerRow":
        return cls(
            id=int(row["id"]), at=str(row.get("at") or ""), event=str(row.get("event") or ""),
            decision=row.get("decision"), block_id=row.get("block_id"), query_sha256=row.get("query_sha256"),
            score=row.get("score"), threshold=row.get("threshold"), decoded_tokens=row.get("decoded_tokens"),
            prefill_tokens_avoided=row.get("prefill_tokens_avoided"),
            timings=_json_column(row.get("timings")) or {}, detail=_json_column(row.get("detail")) or {},
        )

    @property
    def total_s(self) -> Optional[float]:
        """The answer's wall time (``timings.total_s``), when recorded as a number."""
        value = self.timings.get("total_s")
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class BlockUse:
    """How often answers used one block (``exact`` or ``graft``), and when last."""

    block_id: str
    uses: int
    last_use: Optional[str]


USED = ("exact", "graft")
_ROW_COLUMNS = ("id, at, event, decision, block_id, query_sha256, score, threshold, decoded_tokens, "
                "prefill_tokens_avoided, timings, detail")


class LedgerReads:
    """Typed reads of the ledger; mixed into :class:`~skillgraft.store.block_store.BlockStore`
    (which provides ``_select``), so no other module writes SQL against the ledger."""

    def ledger(self, limit: int = 100) -> list[dict]:
        """The latest rows as stored (JSON columns as text), newest first."""
        return self._select("SELECT * FROM ledger ORDER BY id DESC LIMIT ?", [limit])

    def ledger_rows(self, *, block_id: Optional[str] = None, event: Optional[LedgerKind] = None,
                    limit: int = 100) -> list[LedgerRow]:
        """The latest rows, newest first, of one block and/or one event kind."""
        clauses, params = [], []
        if block_id is not None:
            clauses.append("block_id = ?")
            params.append(block_id)
        if event is not None:
            clauses.append("event = ?")
            params.append(event)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self._select(f"SELECT {_ROW_COLUMNS} FROM ledger{where} ORDER BY id DESC LIMIT ?", [*params, int(limit)])
        return [LedgerRow.from_row(row) for row in rows]

    def ledger_counts(self) -> dict[str, int]:
        """How many rows the ledger holds per event kind."""
        rows = self._select("SELECT event, COUNT(*) AS n FROM ledger GROUP BY event")
        return {str(row["event"]): int(row["n"]) for row in rows}

    def block_uses(self) -> dict[str, BlockUse]:
        """Per block id: the answers that used it (decision ``exact`` or ``graft``) and the last one's time."""
        rows = self._select(
            "SELECT block_id, COUNT(*) AS uses, MAX(at) AS last_use FROM ledger"
            " WHERE event = 'generate' AND decision IN (?, ?) AND block_id IS NOT NULL GROUP BY block_id",
            list(USED),
        )
        return {row["block_id"]: BlockUse(row["block_id"], int(row["uses"]), row["last_use"]) for row in rows}
