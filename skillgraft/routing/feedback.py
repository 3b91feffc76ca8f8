"""Corrections that teach the router: ``feedback(query, expected)``.

The one owner of what a correction does; every door (``SkillMemory.feedback``, the CLI, the
gateway's skills API, MCP) calls :func:`give_feedback`:

- ``expected`` a block (name or id) that the query did not reach — routed elsewhere or
  abstained — makes the query a routing key of that block, of kind ``feedback``;
- ``expected=None`` ("no skill fits") for a query that was grafted makes it a
  ``negative``: a later query nearer to it than to the best block's nearest key abstains;
- a query already routed as expected changes nothing (kind ``none``).

A correction replaces an earlier one of the same text, is written to the ledger with who
gave it and when, and can be listed and removed (:func:`list_corrections`,
:func:`remove_correction`). Corrections never touch a verified answer or the exact path: a
query that is itself a verified question is refused (its answer is looked up, not routed).
The threshold is not recalibrated by a correction: on the evaluations in docs/routing.md
recalibrating after the corrections did not pay.
"""

from __future__ import annotations

import getpass
import os
import socket
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Literal, Optional, Protocol

from ..core.questions import normalize_question, question_sha256
from ..core.text_checks import MAX_QUERY_CHARS, clean_query
from ..errors import InputError, SharedBaseError
from ..store.ledger import LedgerEvent

if TYPE_CHECKING:
    from ..core.blocks import Block
    from ..core.recall import Recall
    from ..store.block_store import BlockStore
    from .router import Router


class CorrectableMemory(Protocol):
    """What a correction needs of a memory (:class:`~skillgraft.memory.SkillMemory` has it)."""

    store: "BlockStore"
    router: "Router"
    namespace: str

    def get(self, ref: str) -> "Block": ...

    def store_of(self, block: "Block") -> "BlockStore": ...

    def route(self, query) -> "Recall": ...

__all__ = ["Correction", "FeedbackResult", "give_feedback", "list_corrections", "remove_correction", "default_actor",
           "MAX_CORRECTIONS"]

ACTOR_ENV = "SKILLGRAFT_ACTOR"
MAX_CORRECTIONS = 10_000  # what a store holds and a bundle carries
MAX_ACTOR_CHARS = 200

FeedbackKind = Literal["feedback", "negative", "none"]


@dataclass(frozen=True)
class Correction:
    """A stored correction: a ``feedback`` key of a block, or a ``negative``."""

    id: int
    kind: Literal["feedback", "negative"]
    block_id: Optional[str]
    text: str
    created_at: Optional[str]
    created_by: Optional[str]

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class FeedbackResult:
    """What :func:`give_feedback` did: ``kind`` is ``feedback`` (a key was added to
    ``block_id``), ``negative`` (the query now abstains) or ``none`` (already routed so)."""

    kind: FeedbackKind
    block_id: Optional[str]
    routed: str
    routed_block_id: Optional[str]
    score: float
    correction_id: Optional[int] = None
    reason: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def default_actor() -> str:
    """Who gives feedback from this process: ``$SKILLGRAFT_ACTOR``, else ``user@host``."""
    given = os.environ.get(ACTOR_ENV)
    if given:
        return given[:MAX_ACTOR_CHARS]
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"[:MAX_ACTOR_CHARS]


def give_feedback(memory: CorrectableMemory, query, expected: Optional[str], *, by: Optional[str] = None) -> FeedbackResult:
    """Teach ``memory``'s router that ``query`` belongs to block ``expected`` (name or id) or,
    with ``expected=None``, to no block (see the module docstring)."""
    query = clean_query(query)
    if len(query) > MAX_QUERY_CHARS:
        raise InputError(f"a correction's query is {len(query)} characters (at most {MAX_QUERY_CHARS})")
    if expected is not None and not isinstance(expected, str):
        raise InputError(f"expected is a block name or id, or None for no skill, got {type(expected).__name__}")
    by = _actor(by)
    target = memory.blocks.get(expected) if expected is not None else None
    if target is not None and memory.blocks.store_of(target) is not memory.store:  # a namespace's own blocks alone
        raise SharedBaseError(expected, memory.namespace)
    if target is not None and target.status != "ok":
        raise InputError(f"block {target.id} ({target.name}) is quarantined: it cannot be routed to")
    verified = memory.store.solutions_for(normalize_question(query))
    if verified:
        raise InputError(
            f"the query is the verified question of block {verified[0].id} ({verified[0].name}): it is answered by "
            "lookup, not routed, and corrections never change a verified answer (remove that block instead)"
        )
    recall = memory.route(query)
    routed_id = recall.block.id if recall.decision == "graft" else None
    common = dict(routed=recall.decision, routed_block_id=routed_id, score=float(recall.score))
    wanted = target.id if target is not None else None
    if routed_id == wanted:
        return FeedbackResult("none", wanted, reason="the query is already routed so: nothing to correct", **common)
    kind = "feedback" if target is not None else "negative"
    (row,) = memory.router.key_rows([(kind, [query])])
    stored = memory.store.add_correction(row, wanted, by, MAX_CORRECTIONS)
    detail = {"by": by, "kind": kind, "correction_id": stored["id"], "routed": recall.decision, "routed_block_id": routed_id}
    memory.store.log(LedgerEvent(
        "feedback", decision=kind, block_id=wanted, query_sha256=question_sha256(query),
        score=recall.score, threshold=recall.threshold, detail=detail,
    ))
    reason = (f"the query is now a routing key of block {target.name!r}" if target is not None
              else "queries like this one now abstain")
    return FeedbackResult(kind, wanted, correction_id=stored["id"], reason=reason, **common)


def list_corrections(memory: CorrectableMemory) -> list[Correction]:
    """Every correction of the store, oldest first."""
    return [_correction(row) for row in memory.store.corrections()]


def remove_correction(memory: CorrectableMemory, correction_id, *, by: Optional[str] = None) -> Correction:
    """Remove one correction by its id (from :func:`list_corrections`); logged with who removed it."""
    try:
        key_id = int(correction_id)
    except (TypeError, ValueError):
        raise InputError(f"a correction id is a number, got {correction_id!r}") from None
    removed = _correction(memory.store.remove_correction(key_id))
    memory.store.log(LedgerEvent(
        "feedback", decision="removed", block_id=removed.block_id, query_sha256=question_sha256(removed.text),
        detail={"by": _actor(by), "kind": removed.kind, "correction_id": removed.id},
    ))
    return removed


def _actor(by: Optional[str]) -> str:
    if by is None:
        return default_actor()
    if not isinstance(by, str) or not by.strip() or any(not c.isprintable() for c in by):
        raise InputError("who gives a correction must be a printable, non-empty text")
    return by.strip()[:MAX_ACTOR_CHARS]


def _correction(row: dict) -> Correction:
    return Correction(int(row["id"]), row["kind"], row["block_id"], row["text"], row.get("created_at"), row.get("created_by"))
