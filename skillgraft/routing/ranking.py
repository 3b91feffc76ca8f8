"""What the router ranks and the texts it ranks by: a query's :class:`Ranking`, the lexical
documents of the entries (:func:`lexical_documents`), the routing keys of names and manuals,
and the kinds of key each stage reads."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Iterable, Optional

from ..core.text_checks import MAX_QUERY_CHARS
from .experience import EXPERIENCE
from .generic_requests import GENERIC_MARGIN
from .near_misses import NEAR_MISS

__all__ = ["LEXICAL_WEIGHT", "NO_ROUTABLE_BLOCKS", "Ranking", "lead_sentence", "lexical_documents", "manual_key_texts",
           "name_key", "unranked_reason"]

# A manual's sentences become routing keys; a longer manual's sentences are joined into this many.
MAX_MANUAL_KEYS = 64
_SENTENCE_BREAK = re.compile(r"(?<=[.!?;])\s+|[\n\r\x85\u2028\u2029]+")  # after a stop, or a line break
# Lexical coverage (0..1) is added to the dense score with this weight (docs/routing.md).
LEXICAL_WEIGHT = 0.5
# Besides the dense candidates, the entries of this many best lexical matches are scored.
LEXICAL_CANDIDATES = 8
# Keys that tell a skill's parts apart (heading paths, a resource's own keys): not searched for a skill.
PART_KINDS = ("manual",)
# An imported skill's keys searched on their own, beside its centroid (queries: a skill's name and
# description keys are found through the centroid; verified questions, :mod:`.experience`); every
# key of a plain block is.
ALONE_KINDS = ("example", "feedback", EXPERIENCE)
# Keys that only feed the lexical index (a skill's headings in one text).
LEXICAL_ONLY_KINDS = ("headings",)
# A skill's key that is a term of its dense score of its own, never searched (its description's first sentence).
LEAD_KINDS = ("lead",)
# The kinds whose texts make an imported skill's lexical document (its parts' own keys aside).
SKILL_LEXICAL_KINDS = ("name", "description", "skill", "headings", "example", "feedback", EXPERIENCE)


NO_ROUTABLE_BLOCKS = "the store has no routable blocks (it is empty)"


def unranked_reason(routable: int) -> str:
    """Why a route ranked nothing in a store of ``routable`` routable blocks: it has none, or
    none it may offer."""
    if not routable:
        return NO_ROUTABLE_BLOCKS
    return (f"the store has {routable} routable block{'s' if routable != 1 else ''} but none may be offered "
            "(past its expiry, or made by another runtime)")


def name_key(name: str) -> str:
    """The routing key a block's name gives."""
    return name.replace("-", " ").replace("_", " ")


def lexical_documents(rows: Iterable[dict], groups: dict) -> dict:
    """``{owner: texts}``: an imported skill's (``groups`` maps its blocks to it) name,
    description, headings, examples and corrections, each text once; a plain block's keys."""
    documents: dict[str, dict] = {}
    for row in rows:
        owner = groups.get(row["block_id"])
        if owner is None:
            if row["kind"] in ("negative", NEAR_MISS):
                continue
            owner = row["block_id"]
        elif row["kind"] not in SKILL_LEXICAL_KINDS:
            continue
        documents.setdefault(owner, {})[row["text"]] = None
    return {owner: list(texts) for owner, texts in documents.items()}


def lead_sentence(text: str) -> str:
    """A description's first sentence (all of it when it has one), the text of its skill's lead key."""
    return next((s.strip() for s in _SENTENCE_BREAK.split(text) if s.strip()), text)[:MAX_QUERY_CHARS]


def manual_key_texts(text: str, limit: int = MAX_MANUAL_KEYS) -> list[str]:
    """A manual's sentences as routing keys, in order: fragments under three words are dropped,
    and a manual of more than ``limit`` sentences has neighbouring sentences joined into
    ``limit`` keys or fewer."""
    sentences = [s.strip() for s in _SENTENCE_BREAK.split(text) if len(s.split()) >= 3]
    if len(sentences) > limit:
        size = math.ceil(len(sentences) / limit)
        sentences = [" ".join(sentences[i:i + size]) for i in range(0, len(sentences), size)]
    return [s[:MAX_QUERY_CHARS] for s in sentences]


@dataclass(frozen=True)
class Ranking:
    """One query's scored blocks, best first; each block's nearest-key cosine; the nearest
    negative's; the skills (or blocks) its near misses kept out, ``{owner: (own, near miss)}``;
    per imported skill's block scored, the query's cosine to the nearest generic request."""

    scored: list
    nearest: dict
    negative: float
    kept_out: dict = field(default_factory=dict)
    generic: dict = field(default_factory=dict)

    def vetoed(self, block_id: str) -> bool:
        """A negative is nearer the query than ``block_id``'s nearest key, or (a skill's block) a
        generic request is nearer by :data:`GENERIC_MARGIN` or more."""
        near = self.nearest.get(block_id, 1.0)
        return self.negative > near or self.generic.get(block_id, -1.0) >= near + GENERIC_MARGIN

    def veto_reason(self, block_id: str, name: str) -> str:
        """Why :meth:`vetoed` holds for ``block_id`` (named ``name``)."""
        near = self.nearest.get(block_id, 1.0)
        if self.negative > near:
            return (f"a correction marks a query like this one as fitting no skill (cosine {self.negative:.3f} > "
                    f"{near:.3f} to the nearest key of block {name!r}): abstain")
        return (f"a generic request fits the query better than skill {name!r} (cosine {self.generic[block_id]:.3f} "
                f">= {near:.3f} + {GENERIC_MARGIN} to its nearest key): no skill is meant for it, abstain")

    def best(self) -> tuple[Optional[str], float]:
        """``(block_id, score)`` of the best block, or ``(None, -1.0)`` when none or vetoed."""
        if not self.scored or self.vetoed(self.scored[0][0]):
            return (None, -1.0)
        return self.scored[0]


