"""Routing: embed a query, find the one closest block, or abstain.

Each block has routing keys (its name, description, example queries and, for a manual, the
manual's own sentences) whose vectors are stored in the catalog, so reopening a store re-embeds
nothing. The key index (:mod:`skillgraft.routing.key_index`) is a cache, rebuilt whenever the
catalog changes: a query searches the blocks' centroids and the keys searched alone, then meets
the candidates' own keys. A block's score is the mean of its cosines to its nearest key and its
keys' centroid (and a skill's lead key), plus the lexical evidence (:mod:`skillgraft.routing.lexical`);
an imported skill's blocks rank as one entry, its best block (only the blocks of its default
version are offered, none of a skill that opted out of model invocation), docs/routing.md. The
route grafts the best block when that score reaches the abstain threshold (calibrated per store,
or the documented default), with the set that goes with it (:mod:`.skill_sets`), and abstains otherwise.

Corrections (:mod:`skillgraft.routing.feedback`) teach it: a ``feedback`` key is one more
key of its block; a ``negative`` (a query no block fits) vetoes a graft when it is nearer
the query than the best block's nearest key, as do the generic requests (:mod:`.generic_requests`)
for a skill, by a margin. A skill's near misses (the negative queries its authors wrote,
:mod:`skillgraft.routing.near_misses`) are keys that never attract a query: a skill whose nearest
near miss is at least as near a query as its nearest own key is not offered for it, nor is an entry
past its expiry (at route time, :mod:`skillgraft.core.expiry`). The encoder must be the one the store
recorded (:mod:`skillgraft.routing.encoders`): refused at the first route or key it would embed.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from collections import Counter, OrderedDict
from typing import TYPE_CHECKING, Callable, Iterable, Optional, Sequence

import numpy as np

from ..store.check import usable_vector
from .embedder import DEFAULT_EMBEDDER, Embedder  # noqa: F401  (re-exported)
from ..errors import InputError, RouterError
from .encoders import check_record, encoder_record
from .experience import Experience
from .key_index import KeyIndex, key_matrix
from .generic_requests import GenericPrior
from .lexical import LexicalIndex
from .ranking import (  # noqa: F401  (re-exported)
    ALONE_KINDS, LEAD_KINDS, LEXICAL_CANDIDATES, LEXICAL_ONLY_KINDS, LEXICAL_WEIGHT, MAX_MANUAL_KEYS, PART_KINDS, Ranking,
    lexical_documents, manual_key_texts, name_key, unranked_reason,
)
from .near_misses import NEAR_MISS, NearMisses
from .skill_sets import companions, set_rule
from .parts import PartCandidate, choose_part, is_instructional
from .calibration import (  # noqa: F401  (re-exported)
    DEFAULT_THRESHOLD, THRESHOLD_SETTING, RouterCalibration, calibrate_router, encoder_threshold, evaluate_threshold,
)
from ..core.recall import Decision, Recall  # noqa: F401
from ..core.text_checks import MAX_QUERY_CHARS, clean_query, require_text  # noqa: F401

logger = logging.getLogger("skillgraft.router")

if TYPE_CHECKING:
    from ..core.blocks import Block
    from ..protocols import TextEmbedder
    from ..store.block_store import BlockStore

DEFAULT_IN_SCOPE_TOLERANCE = 0.02
# A block's score mixes its nearest key (weight 1 - w) and its key centroid (weight w).
CENTROID_WEIGHT = 0.5
# Besides the blocks of the nearest keys, those of the nearest centroids of this many skills are scored.
CENTROID_CANDIDATES = 4
# Routing keys a bundle carries per block (a manual's sentence keys, derived again on import, come on top).
MAX_KEYS_PER_BLOCK = 256
MAX_EXAMPLES = MAX_KEYS_PER_BLOCK - 3  # room is left for a block's name, description and question keys
# The entries a query's ranking keeps, best first (a route reports five).
RANKED_KEPT = 8
# A conversation's earlier user turns are routed again with each turn: their vectors are kept.
QUERY_VECTORS_KEPT = 256

@dataclass
class _CatalogRead:
    """What :meth:`Router.index` read of the catalog in one snapshot (``index`` None: to build)."""

    version: object
    blocks: dict
    roles: dict
    texts: list
    index: Optional[KeyIndex]
    negatives: list
    near: list
    rows: list


class Router:
    """Routes queries to blocks of one store."""

    def __init__(self, store: "BlockStore", embedder: Optional["TextEmbedder"] = None) -> None:
        self.store = store
        self.embedder = embedder or Embedder()
        self._record: Optional[dict] = None
        self._negatives = np.zeros((0, 0), np.float32)
        self._near_misses = NearMisses({})
        self._index: Optional[KeyIndex] = None
        self._version: Optional[str] = None
        self._blocks: dict[str, "Block"] = {}
        self._groups: dict[str, str] = {}  # block id -> the imported skill it belongs to
        self._roles: dict = {}
        self._lexical = LexicalIndex.build({})
        self._lexical_position: dict[str, int] = {}
        self._members, self._position, self._skill_blocks, self._parts = {}, {}, {}, {}  # made by index()
        self.cache_dir = store.home / "index"
        self.centroid_weight = CENTROID_WEIGHT
        self._query_vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._query_lock = threading.Lock()
        self._generic = GenericPrior(self.embedder)
        self._experience = Experience(store)  # verified examples beside a graft
        self.default_threshold = encoder_threshold(self.embedder.name)  # until a calibration stores one

    # -- keys ------------------------------------------------------------------------------

    def add_keys(self, block: "Block", texts: Iterable[str], kind: str = "example") -> int:
        """Embed ``texts`` and store them as routing keys of ``block``."""
        return self.add_key_sets(block, [(kind, texts)])

    def add_key_sets(self, block: "Block", sets: Iterable[tuple[str, Iterable[str]]]) -> int:
        """Embed ``[(kind, texts), ...]`` in one batch and store them in one transaction."""
        rows = self.key_rows(sets)
        return self.store.add_routing_keys(block.id, rows) if rows else 0

    def replace_keys(self, block: "Block", texts: Iterable[str], kind: str) -> int:
        """Replace the routing keys of ``kind`` of ``block`` by ``texts``: embedded first, so a
        failing embedder leaves the old keys, then swapped in one transaction."""
        return self.store.set_routing_keys(block.id, kind, self.key_rows([(kind, texts)]))

    def key_rows(self, sets: Iterable[tuple[str, Iterable[str]]]) -> list[dict]:
        """``[(kind, texts), ...]`` embedded in one batch, as the rows the store takes."""
        pairs = [(kind, t.strip()) for kind, texts in sets for t in texts if isinstance(t, str) and t.strip()]
        if not pairs:
            return []
        if self._record is None:
            self.check_encoder()  # the store re-checks the name inside the write
        vectors = self.embedder.encode([t for _, t in pairs])
        return [{"kind": k, "text": t, "embedder": self.embedder.name, "vector": v.tobytes()} for (k, t), v in zip(pairs, vectors)]

    def check_encoder(self) -> None:
        """Refuse a store another encoder embedded (name, dimension, digest); a writable store
        without a record gets this encoder's. Checked again whenever the catalog changed (a
        re-embed elsewhere may have moved the store)."""
        if self._record is None:
            self._record = encoder_record(self.embedder)
        check_record(self.store, self._record)

    def index(self) -> KeyIndex:
        """The key index: in memory, else the cache file if current and intact, else rebuilt.

        The catalog is the source of truth, read in one snapshot (its version, its blocks and
        their keys agree). A missing, stale, damaged or foreign cache file is rebuilt. Keys
        written by another embedder, or whose vector is malformed, are embedded again (and
        stored again, unless the store is read-only).
        """
        version = self.store.catalog_version()
        if self._index is not None and version == self._version:
            return self._index
        self.check_encoder()
        read = self._read_catalog()
        if read.index is None:
            self._build(read)
        self._adopt(read)
        return read.index

    def _read_catalog(self) -> "_CatalogRead":
        """The catalog's routable blocks and their keys, in one snapshot; the cached index when current."""
        with self.store.snapshot():
            version = self.store.catalog_version()
            blocks = {b.id: b for b in self.store.blocks(include_quarantined=False)}
            self._groups, hidden = self.store.skill_routing()
            roles = self.store.skill_part_roles()
            hidden |= {b for b, (role, _, title) in roles.items() if role == "resource" and not is_instructional(title)}
            blocks = {block_id: b for block_id, b in blocks.items() if block_id not in hidden}
            texts = [r for r in self.store.key_texts() if r["block_id"] in blocks]
            stale = self.store.count_stale_keys(self.embedder.name)
            index = None if stale else KeyIndex.load(self.cache_dir, version, self.embedder.name, set(blocks))
            negatives = [] if stale else self.store.negative_vectors()
            near = [] if index is None else [
                (r["block_id"], r["vector"]) for r in self.store.key_vectors(NEAR_MISS) if r["block_id"] in blocks]
            rows = [] if index is not None else [
                dict(r) for r in self.store.routing_keys() if r["block_id"] in blocks or r["kind"] == "negative"
            ]
        return _CatalogRead(version, blocks, roles, texts, index, negatives, near, rows)

    def _build(self, read: "_CatalogRead") -> None:
        """Build ``read``'s index from its keys (their vectors repaired first) and cache it."""
        blocks = read.blocks
        read.version = self._repair_vectors(read.rows, read.version)
        read.negatives = [r["vector"] for r in read.rows if r["kind"] == "negative"]
        read.near = [(r["block_id"], r["vector"]) for r in read.rows if r["kind"] == NEAR_MISS and r["block_id"] in blocks]
        rows = [r for r in read.rows if r["block_id"] in blocks and r["kind"] != NEAR_MISS]
        dimension = (self._record or {}).get("dimension")
        searched = [r for r in rows if self._searched(r)]
        part_rows = [r for r in rows if r["kind"] in PART_KINDS and r["block_id"] in self._groups]
        leads = [r for r in rows if r["kind"] in LEAD_KINDS and r["block_id"] in self._groups]
        alone = [r["block_id"] not in self._groups or r["kind"] in ALONE_KINDS for r in searched]
        read.index = KeyIndex(np.ascontiguousarray(key_matrix(searched, dimension)), [r["block_id"] for r in searched],
                              alone=alone, part_vectors=key_matrix(part_rows, dimension),
                              part_block_ids=[r["block_id"] for r in part_rows],
                              lead_vectors=key_matrix(leads, dimension), lead_block_ids=[r["block_id"] for r in leads])
        try:
            if read.version is not None and not self.store.read_only:
                read.index.save(self.cache_dir, read.version, self.embedder.name)
        except OSError as exc:  # a read-only store still routes
            logger.debug("cannot write the index cache: %s", exc)

    def _adopt(self, read: "_CatalogRead") -> None:
        """Route over ``read`` from now on: its index, negatives, near misses, lexical index and lookups."""
        index, blocks, negatives = read.index, read.blocks, read.negatives
        length = index.centroids.shape[1] * 4 if index.size else (len(negatives[0]) if negatives else None)
        negatives = [v for v in negatives if usable_vector(v, length)]
        self._negatives = (
            np.frombuffer(b"".join(negatives), dtype=np.float32).reshape(len(negatives), -1)
            if negatives else np.zeros((0, index.centroids.shape[1]), np.float32)
        )
        self._near_misses = NearMisses.build(index, self._groups, read.near)
        self._roles = read.roles
        self._lexical = LexicalIndex.build(lexical_documents(read.texts, self._groups))
        self._lexical_position = {owner: i for i, owner in enumerate(self._lexical.owners)}
        self._members = {}
        for position, block_id in enumerate(index.blocks):
            self._members.setdefault(self._groups.get(block_id, block_id), []).append(position)
        self._position = {b: i for i, b in enumerate(index.blocks)}
        self._skill_blocks = {}
        for block_id, skill in self._groups.items():
            if block_id in blocks:
                self._skill_blocks.setdefault(skill, []).append(block_id)
        self._parts = {}
        for row, block_id in enumerate(index.part_block_ids):
            self._parts.setdefault(block_id, []).append(row)
        self._index, self._blocks, self._version = index, blocks, read.version
        self._expires = self.store.deadlines(blocks.values())

    def _searched(self, row: dict) -> bool:
        """Whether a key is one of its entry's searched keys: a skill is found by its own words
        (name, description, examples, corrections), a plain block by all its keys; part keys
        and headings are not searched."""
        if row["kind"] in PART_KINDS and row["block_id"] in self._groups:
            return False
        return row["kind"] not in LEXICAL_ONLY_KINDS + LEAD_KINDS

    def _repair_vectors(self, rows: list[dict], version: str) -> Optional[str]:
        """Embed again, in place, the keys of another embedder or with a malformed vector.

        Returns the catalog version the rows now match: ``version`` when nothing was
        stored, the version after storing the new vectors, or None when another writer
        changed the catalog meanwhile (the index is then rebuilt on the next call).
        """
        mine = Counter(len(r["vector"]) for r in rows if r["embedder"] == self.embedder.name and isinstance(r["vector"], bytes))
        length = mine.most_common(1)[0][0] if mine else None
        bad = [r for r in rows if r["embedder"] != self.embedder.name or not usable_vector(r["vector"], length)]
        if not bad:
            return version
        for row, vector in zip(bad, self.embedder.encode([r["text"] for r in bad])):
            row["embedder"], row["vector"] = self.embedder.name, vector.tobytes()
        if self.store.read_only:
            return version
        return self.store.set_routing_vectors(bad, version)

    # -- routing ---------------------------------------------------------------------------

    @property
    def threshold(self) -> float:
        stored = self.store.setting(THRESHOLD_SETTING)
        return float(stored) if stored is not None else self.default_threshold

    def scores(self, queries: Sequence[str]) -> list[list[tuple[str, float]]]:
        """Per query, the best :data:`RANKED_KEPT` ``[(block_id, score), ...]`` (:meth:`rankings`)."""
        return [ranking.scored for ranking in self.rankings(queries)]

    def rankings(self, queries: Sequence[str], accept: Optional[Callable[["Block"], bool]] = None) -> list["Ranking"]:
        """Per query, the entries (an imported skill, or a plain block) scored best first, each
        as the block the query would get of it; each block's nearest-key cosine and the cosine of
        the nearest negative (-1 when the store has none).

        An entry's score is its dense score (its nearest searched key's cosine and its key
        centroid's, :data:`CENTROID_WEIGHT`, and a skill's lead key's: :meth:`KeyIndex.dense_scores`) plus :data:`LEXICAL_WEIGHT` times its lexical
        coverage (:mod:`skillgraft.routing.lexical`). The candidates are the blocks of the
        nearest index rows (centroids, and keys searched alone; at least
        :data:`CENTROID_CANDIDATES` entries) and of the :data:`LEXICAL_CANDIDATES` best lexical
        matches: only their keys meet the query. The first :data:`RANKED_KEPT` entries are kept,
        a skill's as the part :func:`~skillgraft.routing.parts.choose_part` picks among those
        ``accept`` allows.
        """
        index = self.index()
        if index.size == 0:
            return [Ranking([], {}, -1.0) for _ in queries]
        queries = list(queries)
        vectors = self._encode_queries(queries)
        found = index.nearest_blocks(vectors, lambda block_id: self._groups.get(block_id, block_id), CENTROID_CANDIDATES)
        negative_sims = (vectors @ self._negatives.T).max(axis=1) if len(self._negatives) else np.full(len(vectors), -1.0)
        kept_out, gone = self._near_misses.blocked(vectors), self._expires.hidden()
        generic_sims = self._generic.nearness(vectors) if self._groups else np.full(len(vectors), -1.0)
        results = []
        for row, query in enumerate(queries):
            vector = vectors[row]
            coverage = self._lexical.coverage(query)
            candidates = dict.fromkeys(int(p) for p in found[row] if p >= 0)
            best = np.argpartition(-coverage, LEXICAL_CANDIDATES - 1)[:LEXICAL_CANDIDATES] \
                if len(coverage) > LEXICAL_CANDIDATES else np.arange(len(coverage))
            for i in best:
                if coverage[i] > 0:
                    candidates.update(dict.fromkeys(self._members.get(self._lexical.owners[i], ())))
            positions = np.fromiter(candidates, dtype=np.int64, count=len(candidates))
            nearest_sims, dense_scores = index.dense_scores(vector, positions, self.centroid_weight)
            nearest: dict[str, float] = {}
            scored = {}
            for position, near, dense in zip(positions, nearest_sims, dense_scores):
                b = index.blocks[position]
                nearest[b] = float(near)
                owner = self._groups.get(b, b)
                if owner in kept_out[row] or gone.hides(b, self._groups.get(b)):
                    continue
                lexical = coverage[self._lexical_position[owner]] if owner in self._lexical_position else 0.0
                scored[b] = float(dense) + LEXICAL_WEIGHT * float(lexical)
            ranked = self._by_skill(sorted(scored.items(), key=lambda item: -item[1]))
            ranked = self._with_parts(ranked, nearest, vector, accept)
            generic = {b: float(generic_sims[row]) for b, _ in ranked if b in self._groups}
            results.append(Ranking(ranked, nearest, float(negative_sims[row]), kept_out[row], generic))
        return results

    def _with_parts(self, ranked: list, nearest: dict, vector: np.ndarray, accept) -> list:
        """The first :data:`RANKED_KEPT` entries of ``ranked`` that ``accept`` allows, a skill's as
        its part (:func:`~skillgraft.routing.parts.choose_part`), with its skill's nearest-key cosine."""
        out = []
        for block_id, score in ranked:
            if len(out) >= RANKED_KEPT:
                break
            skill = self._groups.get(block_id)
            if skill is None:
                if accept is None or block_id not in self._blocks or accept(self._blocks[block_id]):
                    out.append((block_id, score))
                continue
            parts = [part for part in self._skill_blocks.get(skill, ()) if accept is None or accept(self._blocks[part])]
            rows = [self._parts.get(part, []) for part in parts]
            flat = [r for own in rows for r in own]  # all the skill's part keys meet the query at once
            sims = (self._index.part_vectors[flat] @ vector).tolist() if flat else []
            candidates, at = [], 0
            for part, own in zip(parts, rows):
                role, number, _ = self._roles.get(part, ("section", 0, ""))
                candidates.append(PartCandidate(part, role, number, max(sims[at:at + len(own)]) if own else None))
                at += len(own)
            chosen = choose_part(candidates)
            if chosen is not None:  # judged by its skill's nearest key (a veto too), not by the part's own
                nearest[chosen] = nearest[block_id]
                out.append((chosen, score))
        return out

    def _encode_queries(self, queries: list[str]) -> np.ndarray:
        """The encoder's vectors of ``queries``, the last :data:`QUERY_VECTORS_KEPT` kept."""
        with self._query_lock:
            kept = {q: self._query_vectors[q] for q in queries if q in self._query_vectors}
        missing = list(dict.fromkeys(q for q in queries if q not in kept))
        if missing:
            fresh = np.asarray(self.embedder.encode(missing))
            with self._query_lock:
                for query, vector in zip(missing, fresh):
                    kept[query] = self._query_vectors[query] = vector
                    self._query_vectors.move_to_end(query)
                while len(self._query_vectors) > QUERY_VECTORS_KEPT:
                    self._query_vectors.popitem(last=False)
        return np.stack([kept[q] for q in queries])

    def _by_skill(self, scored: list) -> list:
        """The ranking with one entry per imported skill (its best block) and every other block:
        skills are ranked, not their parts, so a skill's count of blocks weighs nothing."""
        seen: set[str] = set()
        ranked = []
        for block_id, score in scored:
            group = self._groups.get(block_id)
            if group is not None:
                if group in seen:
                    continue
                seen.add(group)
            ranked.append((block_id, score))
        return ranked

    def route(self, query, *, accept: Optional[Callable[["Block"], bool]] = None) -> Recall:
        """Graft the best block when its score reaches the threshold; otherwise abstain.

        ``accept`` narrows the candidates (say, to blocks this runtime can graft).
        """
        query = clean_query(query)
        if len(query) > MAX_QUERY_CHARS:
            query = query[:MAX_QUERY_CHARS]
        threshold = self.threshold
        ranking = self.rankings([query], accept)[0]
        ranked = [
            (block_id, score)
            for block_id, score in ranking.scored
            if block_id in self._blocks and (accept is None or accept(self._blocks[block_id]))
        ]
        out = "".join(f"; {owner!r} not offered: a near miss of it is nearer (cosine {near:.3f} >= {own:.3f})"
                      for owner, (own, near) in sorted(ranking.kept_out.items())[:3])
        if not ranked:
            return Recall("abstain", None, 0.0, threshold, ("no block is left to offer" + out) if out else
                          unranked_reason(len(self._blocks)))
        (block_id, score), block = ranked[0], self._blocks[ranked[0][0]]
        runner_up = self._blocks[ranked[1][0]].name if len(ranked) > 1 else None
        if ranking.vetoed(block_id):
            return Recall("abstain", None, score, threshold, ranking.veto_reason(block_id, block.name), block.name, ranked[:5])
        if score >= threshold:
            reason = f"block {block.name!r} scores {score:.3f} >= threshold {threshold:.3f}{out}"
            with_it = companions(ranked, self._blocks, ranking, threshold, *set_rule(self.store.setting))
            graft = Recall("graft", block, score, threshold, reason, runner_up, ranked[:5], companions=with_it)
            return self._experience.beside(graft, self._encode_queries([query])[0], self._version)
        reason = f"best score {score:.3f} (block {block.name!r}) < threshold {threshold:.3f}: out of domain{out}"
        return Recall("abstain", None, score, threshold, reason, block.name, ranked[:5])

    # -- calibration -----------------------------------------------------------------------

    def calibrate(
        self,
        in_domain: Sequence[tuple[str, str]],
        out_of_domain: Sequence[str],
        *,
        in_scope_tolerance: float = DEFAULT_IN_SCOPE_TOLERANCE,
        max_false_accept: Optional[float] = None,
        save: bool = True,
    ) -> RouterCalibration:
        """Choose the abstain threshold from labelled queries and store it.

        ``in_domain`` pairs a query with the name (or id) of the block it should reach (for an
        imported skill, its name or any of its blocks: any of them is right).
        Among thresholds whose in-scope accuracy (right block, not abstained) is within
        ``in_scope_tolerance`` of the best reachable, the one abstaining on the most
        out-of-domain queries wins; ``max_false_accept`` caps the out-of-domain accept rate.
        """
        return calibrate_router(self, in_domain, out_of_domain, in_scope_tolerance=in_scope_tolerance,
                                max_false_accept=max_false_accept, save=save)
