"""What the inspector shows, as typed records read from a store: no HTML, no SQL here.

The store owns every read (blocks, routing keys, ledger rows, the check); this module
shapes them for the pages: one skill (the list of them is :mod:`.skill_list`), the
decisions over the latest answers with their latency percentiles, and the store's health.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Optional

import numpy as np

from ..core.blocks import Block
from ..errors import BlockNotFoundError
from ..skills.trigger_evals import SkillTriggerScore, score_triggers, skill_eval_queries
from ..store.ledger import BlockUse, LedgerRow

if TYPE_CHECKING:
    from ..core.recall import Recall
    from ..store.block_store import BlockStore
    from .sources import InspectorSource
    from ..store.check import CheckReport

DECISIONS = ("exact", "graft", "fallback", "abstain")
ANSWER_WINDOW = 5_000  # the latest answers the decisions page summarises
HISTORY_ROWS = 50
MAX_BUCKETS = 48
BUCKET_SECONDS = (10, 30, 60, 300, 900, 3600, 6 * 3600, 86400, 7 * 86400)
PERCENTILES = {"p50": 50, "p90": 90, "p99": 99}


@dataclass(frozen=True)
class ImportedSkillView:
    """The imported Agent Skill a block belongs to: its default version's frontmatter, parts
    (sections and resources), files, scripts, assets and warnings, and its versions."""

    name: str
    version: int
    versions: list
    folder: str
    model_invocable: bool
    frontmatter: dict
    parts: list
    files: list
    scripts: list
    assets: list
    warnings: list


def imported_skill_view(store: "BlockStore", block_id: str) -> Optional[ImportedSkillView]:
    """The imported skill holding ``block_id`` (its default version), or None for a plain block."""
    name = store.skill_of_block(block_id)
    if name is None:
        return None
    row = store.skill_version(name)
    record = row["record"]
    return ImportedSkillView(
        name, row["version"], [v["version"] for v in store.skill_versions(name)], row["folder"] or "",
        bool(record.get("model_invocable", True)), record.get("frontmatter", {}),
        store.skill_parts(name, row["version"]), store.skill_files(name, row["version"]),
        record.get("scripts", []), record.get("assets", []), record.get("warnings", []),
    )


@dataclass(frozen=True)
class SkillDetail:
    """One skill: its block, routing keys by kind, uses and latest ledger rows, and the
    imported Agent Skill it is a part of (None for a plain block)."""

    block: Block
    keys: dict[str, list[str]]
    use: Optional[BlockUse]
    history: list[LedgerRow]
    imported: Optional[ImportedSkillView] = None

    @property
    def examples(self) -> list[str]:
        return self.keys.get("example", [])


def skill_detail(stores: list, ref: str) -> SkillDetail:
    """The skill ``ref`` names (id, unique id prefix or name) in the first of ``stores`` holding
    it, or :class:`BlockNotFoundError`."""
    for store in stores:
        try:
            block = store.get(ref)
            break
        except BlockNotFoundError:
            if store is stores[-1]:
                raise
    keys: dict[str, list[str]] = {}
    for key in store.routing_keys(block.id):
        keys.setdefault(key["kind"], []).append(key["text"])
    history = store.ledger_rows(block_id=block.id, limit=HISTORY_ROWS)
    return SkillDetail(block, keys, store.block_uses().get(block.id), history, imported_skill_view(store, block.id))


def skill_triggers(source: "InspectorSource", name: str) -> Optional[SkillTriggerScore]:
    """The trigger precision and recall of imported skill ``name`` on the held-out part of its
    ``eval_queries.json`` (as ``skills eval`` scores them), each query routed as the memory
    would (nothing logged); None without eval queries."""
    with source.reading() as store:
        version, queries = skill_eval_queries(store, name)
    if not queries:
        return None

    def routed(query: str) -> tuple[Optional[str], str]:
        recall = source.recall(query)
        with source.reading() as store:
            return (store.skill_of_block(recall.block_id) if recall.decision == "graft" else None), recall.decision

    return score_triggers(name, version, queries, routed)


@dataclass(frozen=True)
class Bucket:
    """The answers of one time interval."""

    label: str
    counts: dict[str, int]
    avoided: int


@dataclass(frozen=True)
class DecisionStats:
    """The latest answers (``generate`` rows, at most ``window``): decisions over time,
    prefill tokens avoided, and total-time percentiles per decision."""

    answers: int
    window: int
    first_at: Optional[str]
    last_at: Optional[str]
    bucket_seconds: int
    buckets: list[Bucket]
    totals: dict[str, int]
    avoided_total: int
    latency: dict[str, dict[str, Optional[float]]]
    timed: dict[str, int] = field(default_factory=dict)

    @property
    def decisions(self) -> list[str]:
        """The decisions seen, in their usual order, then any other, by name."""
        return [d for d in DECISIONS if d in self.totals] + sorted(set(self.totals) - set(DECISIONS))


def _when(at: str) -> Optional[datetime]:
    try:
        moment = datetime.fromisoformat(at)
    except (TypeError, ValueError):
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _label(start: float, seconds: int, span_days: bool) -> str:
    moment = datetime.fromtimestamp(start, timezone.utc)
    if seconds >= 86400:
        return moment.strftime("%Y-%m-%d")
    clock = "%H:%M" if seconds >= 60 else "%H:%M:%S"
    return moment.strftime(f"%m-%d {clock}" if span_days else clock)


def decision_stats(store: "BlockStore", window: int = ANSWER_WINDOW) -> DecisionStats:
    """Summarise the latest ``window`` answers of the ledger (times in UTC)."""
    rows = list(reversed(store.ledger_rows(event="generate", limit=window)))
    timed = [(moment, row) for row in rows if (moment := _when(row.at)) is not None]
    totals: dict[str, int] = {}
    durations: dict[str, list[float]] = {}
    for row in rows:
        decision = row.decision or "unknown"
        totals[decision] = totals.get(decision, 0) + 1
        if row.total_s is not None:
            durations.setdefault(decision, []).append(row.total_s)
    buckets: list[Bucket] = []
    seconds = BUCKET_SECONDS[0]
    if timed:
        first, last = timed[0][0].timestamp(), timed[-1][0].timestamp()
        seconds = next((s for s in BUCKET_SECONDS if (last - first) / s < MAX_BUCKETS), BUCKET_SECONDS[-1])
        start = first // seconds * seconds
        n = int((last - start) // seconds) + 1
        counts = [dict() for _ in range(n)]
        avoided = [0] * n
        for moment, row in timed:
            i = min(n - 1, int((moment.timestamp() - start) // seconds))
            counts[i][row.decision or "unknown"] = counts[i].get(row.decision or "unknown", 0) + 1
            avoided[i] += row.prefill_tokens_avoided or 0
        span_days = timed[0][0].date() != timed[-1][0].date()
        buckets = [Bucket(_label(start + i * seconds, seconds, span_days), counts[i], avoided[i]) for i in range(n)]
    latency = {
        decision: {name: float(np.percentile(values, q)) for name, q in PERCENTILES.items()}
        for decision, values in durations.items()
    }
    return DecisionStats(
        answers=len(rows), window=window, first_at=rows[0].at if rows else None, last_at=rows[-1].at if rows else None,
        bucket_seconds=seconds, buckets=buckets, totals=totals,
        avoided_total=sum(row.prefill_tokens_avoided or 0 for row in rows), latency=latency,
        timed={decision: len(values) for decision, values in durations.items()},
    )


@dataclass(frozen=True)
class Candidate:
    """One block the router scored for a query."""

    block_id: str
    name: str
    kind: str
    score: float


@dataclass(frozen=True)
class RouteView:
    """What the memory would do with a query, and why: nothing generated, nothing written."""

    query: str
    recall: "Recall"
    candidates: list[Candidate]


def route_view(stores: list, query: str, recall: "Recall") -> RouteView:
    names = {block.id: block for store in reversed(stores) for block in store.blocks()}
    candidates = []
    for block_id, score in recall.candidates:
        block = names.get(block_id)
        candidates.append(Candidate(block_id, block.name if block else block_id, block.kind if block else "?", float(score)))
    return RouteView(query, recall, candidates)


@dataclass(frozen=True)
class Health:
    """The store's check and its shape: where it lives, its catalog version, its ledger."""

    report: "CheckReport"
    home: str
    catalog: str
    blocks: str
    catalog_version: str
    ledger: dict[str, int]
    read_only: bool


def health(store: "BlockStore") -> Health:
    """Check every block of ``store`` (never repairs: nothing is written)."""
    report = store.check()
    return Health(report, str(store.home), store.catalog.where, store.storage.where, store.catalog_version(),
                  store.ledger_counts(), bool(store.read_only))
