"""Block: one captured KV state as the catalog records it.

A block's payload is the raw per-sequence llama.cpp state of its source tokens; its id is
the first 16 hex digits of the payload's SHA-256 and its file is ``blocks/<sha256>.kv``;
``blake3``, recorded since catalog migration 9, is what a read from disk verifies.
Because capture is byte-exact, the same text under the same runtime always gives the same
payload, so the same block.

A **text block** (an imported skill's part) holds only its text: no payload, no tokens, no
runtime (its ``fingerprint_id`` is :data:`TEXT_RUNTIME`). Its id is the first 16 hex digits
of :func:`text_sha256` of its text; its KV cells are made where it is first used, after the
app's own prompt, and kept as a prefix state (:mod:`skillgraft.kv`).
"""

from __future__ import annotations

import hashlib
from typing import Literal, Optional

import numpy as np
from pydantic import BaseModel, ConfigDict

BlockKind = Literal["manual", "solution"]
BlockStatus = Literal["ok", "quarantined"]
BLOCK_SUFFIX = ".kv"
TEXT_RUNTIME = "text"  # the fingerprint id of a text block: it belongs to no runtime
_TEXT_DOMAIN = b"skillgraft text block\0"


def solution_text(question: str, answer: str, method: Optional[str]) -> str:
    """The text a solution block captures."""
    text = f"Verified solution.\nQuestion: {question}\nAnswer: {answer}"
    if method:
        text += f"\nMethod:\n{method.strip()}"
    return text


def text_sha256(source: str) -> str:
    """The content address of a text block of ``source`` (never a payload's SHA-256)."""
    return hashlib.sha256(_TEXT_DOMAIN + source.encode("utf-8")).hexdigest()


def block_id_for(sha256: str) -> str:
    return sha256[:16]


def tokens_to_bytes(tokens) -> bytes:
    return np.asarray(list(tokens), dtype="<i4").tobytes()


def tokens_from_bytes(data: bytes) -> tuple[int, ...]:
    return tuple(int(t) for t in np.frombuffer(data, dtype="<i4"))


def tokens_sha256(tokens) -> str:
    return hashlib.sha256(tokens_to_bytes(tokens)).hexdigest()


def text_block(source: str, *, name: str, created_at: str, kind: "BlockKind" = "manual", **fields) -> "Block":
    """A text block of ``source``: no captured state (its cells are made on first use)."""
    sha256 = text_sha256(source)
    return Block(id=block_id_for(sha256), sha256=sha256, name=name, kind=kind, source=source, tokens=(),
                 tokens_sha256=tokens_sha256(()), n_tokens=0, n_bytes=0, fingerprint_id=TEXT_RUNTIME,
                 created_at=created_at, **fields)


class Block(BaseModel):
    """A catalogued block. Solutions also carry their verified question and answer."""

    model_config = ConfigDict(frozen=True)

    id: str
    sha256: str
    name: str
    kind: BlockKind
    description: str = ""
    source: str
    tokens: tuple[int, ...]
    tokens_sha256: str
    n_tokens: int
    n_bytes: int
    fingerprint_id: str
    created_at: str
    status: BlockStatus = "ok"
    question: Optional[str] = None
    question_key: Optional[str] = None
    answer: Optional[str] = None
    method: Optional[str] = None
    verifier: Optional[str] = None
    verifier_output_sha256: Optional[str] = None
    verify_seconds: Optional[float] = None
    blake3: Optional[str] = None
    expires_at: Optional[str] = None  # hidden after it (catalog migration 19, :mod:`skillgraft.core.expiry`)

    @property
    def text_only(self) -> bool:
        """Whether this is a text block: its text, no captured state (its cells are made on use)."""
        return self.fingerprint_id == TEXT_RUNTIME

    @property
    def file_name(self) -> str:
        return self.sha256 + BLOCK_SUFFIX

    @classmethod
    def from_row(cls, row: dict) -> "Block":
        values = dict(row)
        values["tokens"] = tokens_from_bytes(values["tokens"])
        return cls(**values)

    def to_row(self) -> dict:
        row = self.model_dump()
        row["tokens"] = tokens_to_bytes(self.tokens)
        return row

    def summary(self) -> dict:
        """The catalog row for people and JSON: no tokens, source cut short."""
        row = self.model_dump(exclude={"tokens"})
        if len(row["source"]) > 200:
            row["source"] = row["source"][:200] + "…"
        return row
