"""Near misses: queries that must not route to one skill, though they look like it.

A skill's authors write them as the negative queries of its ``eval_queries.json``; the importer
stores those of the training part as keys of kind :data:`NEAR_MISS` of the skill's first block.
They are not keys that attract a query: the router leaves them out of its key index and
centroids and keeps them here, per owner (the imported skill of the block, or the block itself).

The rule, for one query: an owner with near misses is not offered when its nearest near miss
is at least as near the query as its nearest own key (cosines; a tie blocks). The next skill
takes its place, or the route abstains. It has no margin to tune: it is the rule the store-wide
negatives already follow (a correction nearer the query than the best block's nearest key
vetoes it), applied to one skill, and a margin chosen on the collection's few held-out
queries would fit them rather than measure anything. An owner without near misses is never
looked at, so routing to it is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NEAR_MISS = "near_miss"


@dataclass(frozen=True)
class NearMisses:
    """Per owner with near misses: the vectors of its own keys and of its near misses."""

    owners: dict  # owner -> (own key vectors, near-miss vectors), float32 rows

    @classmethod
    def build(cls, index, groups: dict, rows: list[tuple[str, bytes]]) -> "NearMisses":
        """From the key index (its own keys), ``groups`` (block id -> skill) and the near-miss
        rows ``(block_id, vector)`` of routable blocks; a vector of another length is left out."""
        owner_of = lambda block_id: groups.get(block_id, block_id)  # noqa: E731
        width = index.centroids.shape[1] * 4
        wanted: dict[str, list[bytes]] = {}
        for block_id, vector in rows:
            if isinstance(vector, bytes) and len(vector) == width:
                wanted.setdefault(owner_of(block_id), []).append(vector)
        if not wanted or not index.size:
            return cls({})
        positions: dict[str, list[int]] = {}
        for position, block_id in enumerate(index.block_ids):
            if owner_of(block_id) in wanted:
                positions.setdefault(owner_of(block_id), []).append(position)
        owners = {}
        for owner, vectors in wanted.items():
            if owner not in positions:
                continue  # nothing of it is routable: nothing to block
            own = index.keys[positions[owner]]
            near = np.frombuffer(b"".join(vectors), dtype=np.float32).reshape(len(vectors), -1)
            owners[owner] = (own, near)
        return cls(owners)

    def blocked(self, vectors: np.ndarray) -> list[dict]:
        """Per query row, ``{owner: (nearest own key, nearest near miss)}`` of the owners it blocks."""
        found: list[dict] = [{} for _ in range(len(vectors))]
        for owner, (own, near) in self.owners.items():
            best_own = (vectors @ own.T).max(axis=1)
            best_near = (vectors @ near.T).max(axis=1)
            for row in np.nonzero(best_near >= best_own)[0]:
                found[row][owner] = (float(best_own[row]), float(best_near[row]))
        return found
