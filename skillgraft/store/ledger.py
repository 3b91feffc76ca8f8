"""Ledger events: one typed row per recall, generation, deposit, import or solve.

The ledger's columns are fixed here, so no caller's keyword ever becomes a column name in
SQL; ``timings`` and ``detail`` are stored as JSON text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal, Optional

LedgerKind = Literal["recall", "generate", "deposit", "import", "solve"]


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
