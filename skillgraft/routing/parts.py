"""Which files of a skill are routed, and which part of a chosen skill a query gets.

Only instructional text is routed: a licence, a notice, a changelog and the like
(:func:`is_instructional`) stays among the skill's stored files, for export, but becomes no
part. Within a chosen skill the body comes first (its best-fitting section); one of its
resources (``references/*.md`` …) is taken instead only when it fits the query clearly better,
by :data:`REFERENCE_MARGIN` cosine or more (:func:`choose_part`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Optional, Sequence

__all__ = ["PartCandidate", "REFERENCE_MARGIN", "choose_part", "is_instructional"]

REFERENCE_MARGIN = 0.1
# File names (any suffix, any case) that carry terms of use or bookkeeping, not instructions.
_NOT_INSTRUCTIONAL = re.compile(
    r"^(licen[cs]e|copying|copyright|notice|patents|authors|contributors|changelog|changes|history|"
    r"code_of_conduct|security|funding|codeowners|third[_-]party[_-]notices)"
    r"([-.](mit|apache|bsd|gpl|lgpl|mpl|[0-9.]+|txt|md|rst|markdown))*$",
    re.IGNORECASE,
)


def is_instructional(path: str) -> bool:
    """Whether a skill's file ``path`` is instructional text to route (not a licence, notice,
    changelog, list of authors or the like)."""
    return not _NOT_INSTRUCTIONAL.match(PurePosixPath(path).name)


@dataclass(frozen=True)
class PartCandidate:
    """One routable part of a skill: its block, its role (``section`` or ``resource``), its
    place among the skill's parts and its cosine to the query (its nearest own key; None when
    it has no keys of its own)."""

    block_id: str
    role: str
    number: int
    cosine: Optional[float]


def choose_part(parts: Sequence[PartCandidate]) -> Optional[str]:
    """The block a query gets of a chosen skill: the body section that fits best (the first
    section when none has keys of its own), unless a resource fits better by at least
    :data:`REFERENCE_MARGIN`; None when ``parts`` is empty."""
    if not parts:
        return None
    by_fit = lambda p: (p.cosine if p.cosine is not None else -2.0, -p.number)  # noqa: E731
    sections = [p for p in parts if p.role != "resource"]
    resources = [p for p in parts if p.role == "resource" and p.cosine is not None]
    body = max(sections, key=by_fit) if sections else None
    if body is not None and (body.cosine is None or all(p.cosine is None for p in sections)):
        body = min(sections, key=lambda p: p.number)
    best_resource = max(resources, key=by_fit) if resources else None
    if body is None:
        return (best_resource or min(parts, key=lambda p: p.number)).block_id
    body_fit = body.cosine if body.cosine is not None else -1.0
    if best_resource is not None and best_resource.cosine >= body_fit + REFERENCE_MARGIN:
        return best_resource.block_id
    return body.block_id
