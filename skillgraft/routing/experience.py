"""Experience: verified questions as evidence for the skills that answered them.

When an answer to a question is verified (:meth:`~skillgraft.SkillMemory.learn`), the question
and answer are stored as a solution and the question becomes a routing key of kind
:data:`EXPERIENCE` of each skill the answer used, recording the solution it came from
(``created_by`` ``solution:<id>``). Such a key is one more searched key of its skill (as an
example is): a later question near it finds the skill by it, through its nearest key, its
centroid and its lexical document (a skill represented by the queries it answered). The
solution itself has no routing key, so routing never grafts it: its answer is given only for
its own question (the ``exact`` decision, by the question's normal form), never for a near one.

When a skill is grafted, the verified solutions of its experience keys nearest the question
(at most :data:`MAX_BESIDE` of the routed set's, :meth:`Experience.beside`) go with it (:attr:`Recall.examples`): the
pipeline places them after the skills as worked examples (:func:`~skillgraft.core.placement.examples_text`).
A store without experience keys routes and places exactly as before.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Optional

import numpy as np

from ..core.expiry import expired
from ..core.questions import normalize_question
from ..core.recall import Recall

if TYPE_CHECKING:
    from ..core.blocks import Block
    from ..store.block_store import BlockStore

__all__ = ["EXPERIENCE", "MAX_BESIDE", "SOLUTION_ORIGIN", "Experience", "experience_rows", "solution_of"]

EXPERIENCE = "experience"
SOLUTION_ORIGIN = "solution:"
# Worked examples placed beside a grafted skill: a few show the way, more lengthen every prompt.
MAX_BESIDE = 2


def experience_rows(rows: list[dict], solution: "Block", at: str) -> list[dict]:
    """Embedded key rows (:meth:`~skillgraft.routing.router.Router.key_rows`) as experience
    keys that record ``solution`` as their origin, made ``at``."""
    return [{**row, "kind": EXPERIENCE, "created_by": f"{SOLUTION_ORIGIN}{solution.id}", "created_at": at}
            for row in rows]


def solution_of(store: "BlockStore", key: dict) -> Optional["Block"]:
    """The verified solution an experience key came from, while it is stored, healthy and
    unexpired and its question is still the key's; else None."""
    origin = key.get("created_by") or ""
    if not origin.startswith(SOLUTION_ORIGIN):
        return None
    wanted = origin[len(SOLUTION_ORIGIN):]
    return next((b for b in store.solutions_for(normalize_question(key["text"]))
                 if b.id == wanted and not expired(b.expires_at)), None)


class Experience:
    """One store's experience keys, for :meth:`beside`: which blocks have them is read once per
    catalog version, their rows only for a grafted block that has some."""

    def __init__(self, store: "BlockStore") -> None:
        self.store = store
        self._version: Optional[str] = None
        self._owners: frozenset = frozenset()

    def owners(self, version: Optional[str]) -> frozenset:
        """The ids of the blocks with experience keys, as of catalog ``version`` (read again when
        it changed, or when it is None)."""
        if version is None or version != self._version:
            self._owners = frozenset(row["block_id"] for row in self.store.key_vectors(EXPERIENCE))
            self._version = version
        return self._owners

    def beside(self, recall: Recall, vector: np.ndarray, version: Optional[str], limit: int = MAX_BESIDE) -> Recall:
        """``recall`` with the verified solutions of its routed set's experience keys nearest the
        query (``vector``, unit length), at most ``limit``, nearest first; unchanged for no graft
        or no experience."""
        if recall.decision != "graft" or limit <= 0:
            return recall
        owners = self.owners(version)
        found = []
        for block in recall.members:
            if block.id not in owners:
                continue
            for key in self.store.routing_keys(block.id):
                data = key.get("vector")
                if key["kind"] == EXPERIENCE and isinstance(data, bytes) and len(data) == vector.nbytes:
                    found.append((-float(np.frombuffer(data, dtype=np.float32) @ vector), key["id"], key))
        chosen: list = []
        for _, _, key in sorted(found, key=lambda item: item[:2]):
            solution = solution_of(self.store, key)
            if solution is not None and all(solution.id != b.id for b in chosen):
                chosen.append(solution)
            if len(chosen) >= limit:
                break
        return dataclasses.replace(recall, examples=tuple(chosen)) if chosen else recall
