"""Trigger evaluations the skill authors already write: ``eval_queries.json`` in a skill folder,
a list of ``{"query": ..., "should_trigger": true|false}``.

The queries are split once, by a hash of each query, into a training part (about 60 %) and a
held-out part (about 40 %, as the skill-creation guide splits them), which
:func:`eval_triggers` routes to report each skill's trigger precision and recall. At
import the training part's positive queries become example keys of the skill and its negative
ones near misses of that skill (:mod:`skillgraft.routing.near_misses`: a query like one of them
is not routed to this skill; it is not a store-wide correction, which would say "no skill
fits"). At most :data:`MAX_TRAINING_QUERIES` of each; a query labelled both ways is no near
miss. A file over :data:`MAX_EVAL_QUERIES_BYTES`, or one that is not a JSON list (nested too
deeply to parse, say), is not used, with a warning. The queries are read from the stored version's files, not from disk.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Optional

EVAL_QUERIES = "eval_queries.json"
HELD_OUT_SHARE = 0.4
MAX_EVAL_QUERIES = 256
MAX_EVAL_QUERIES_BYTES = 2 << 20  # 256 queries of 2,000 characters, escaped; a larger file is not read
MAX_QUERY_CHARS = 2_000
MAX_TRAINING_QUERIES = 32  # examples, and near misses, one skill version takes from its queries


def is_held_out(query: str) -> bool:
    """Whether ``query`` belongs to the held-out part (stable across runs and machines)."""
    digest = hashlib.sha256(" ".join(query.split()).casefold().encode("utf-8")).digest()
    return digest[0] < HELD_OUT_SHARE * 256


def read_eval_queries(raw: Optional[bytes], warnings: Optional[list] = None) -> list[tuple[str, bool]]:
    """``[(query, should_trigger), ...]`` of an ``eval_queries.json``; malformed entries are left out."""
    if raw is None:
        return []
    if len(raw) > MAX_EVAL_QUERIES_BYTES:
        if warnings is not None:
            warnings.append(f"{EVAL_QUERIES} is {len(raw):,} bytes, over the {MAX_EVAL_QUERIES_BYTES:,} read: not used")
        return []
    try:
        items = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        items = None
    if not isinstance(items, list):
        if warnings is not None:
            warnings.append(f"{EVAL_QUERIES} is not a JSON list: not used")
        return []
    queries = []
    for item in items[:MAX_EVAL_QUERIES]:
        if not isinstance(item, dict) or not isinstance(item.get("should_trigger"), bool):
            continue
        query = item.get("query")
        if isinstance(query, str) and query.strip() and len(query) <= MAX_QUERY_CHARS and "\x00" not in query:
            queries.append((query.strip(), item["should_trigger"]))
    return queries


def training_examples(raw: Optional[bytes], warnings: Optional[list] = None, limit: int = MAX_TRAINING_QUERIES) -> list[str]:
    """The positive queries of the training part: the skill's example keys."""
    return training_queries(raw, warnings, limit)[0]


def training_queries(
    raw: Optional[bytes], warnings: Optional[list] = None, limit: int = MAX_TRAINING_QUERIES
) -> tuple[list[str], list[str]]:
    """``(examples, near misses)``: the positive and the negative queries of the training part,
    at most ``limit`` of each (the rest left out, with a warning); a negative that is also a
    positive is left out of the near misses."""
    train = [(q, positive) for q, positive in read_eval_queries(raw, warnings) if not is_held_out(q)]
    positives = list(dict.fromkeys(q for q, positive in train if positive))
    seen = {" ".join(q.split()).casefold() for q in positives}
    negatives = list(dict.fromkeys(q for q, positive in train if not positive))
    both = [q for q in negatives if " ".join(q.split()).casefold() in seen]
    negatives = [q for q in negatives if q not in both]
    if warnings is not None:
        if both:
            warnings.append(f"{EVAL_QUERIES}: {len(both)} queries are labelled both ways: not used as near misses")
        for what, items in (("positive", positives), ("negative", negatives)):
            if len(items) > limit:
                warnings.append(f"{EVAL_QUERIES}: {len(items)} {what} training queries, the first {limit} used")
    return positives[:limit], negatives[:limit]


@dataclass
class SkillTriggerScore:
    """How often routing picks a skill for its own eval queries (held-out part, or all)."""

    name: str
    version: int
    held_out_only: bool
    positives: int = 0
    negatives: int = 0
    true_positives: int = 0
    false_positives: int = 0
    misses: list = field(default_factory=list)

    @property
    def precision(self) -> Optional[float]:
        triggered = self.true_positives + self.false_positives
        return self.true_positives / triggered if triggered else None

    @property
    def recall(self) -> Optional[float]:
        return self.true_positives / self.positives if self.positives else None

    def as_dict(self) -> dict:
        return {**asdict(self), "precision": self.precision, "recall": self.recall}


def skill_eval_queries(store, skill: str, *, held_out_only: bool = True) -> tuple[int, list[tuple[str, bool]]]:
    """``(version, queries)``: the default version of ``skill`` and its eval queries (the
    held-out part, or all), read from the stored files."""
    version = store.skill_default(skill)
    files = {f["path"]: f["data"] for f in store.skill_files(skill, version, with_data=True)}
    return version, [(q, p) for q, p in read_eval_queries(files.get(EVAL_QUERIES)) if is_held_out(q) or not held_out_only]


def score_triggers(skill: str, version: int, queries, routed, *, held_out_only: bool = True) -> SkillTriggerScore:
    """The trigger score of ``skill`` on ``queries``; ``routed(query)`` says where a query
    went: ``(skill name or None, decision)``."""
    score = SkillTriggerScore(skill, version, held_out_only)
    for query, positive in queries:
        where, decision = routed(query)
        triggered = where == skill
        score.positives += positive
        score.negatives += not positive
        score.true_positives += positive and triggered
        score.false_positives += (not positive) and triggered
        if positive != triggered:
            score.misses.append({"query": query, "should_trigger": positive, "routed_to": where or decision})
    return score


def eval_triggers(memory, name: Optional[str] = None, *, held_out_only: bool = True) -> list[SkillTriggerScore]:
    """Per skill of ``memory`` (or only ``name``) with eval queries, its trigger precision and
    recall as ``memory.route`` sends them."""

    def routed(query: str) -> tuple[Optional[str], str]:
        recall = memory.route(query)
        return (memory.store.skill_of_block(recall.block_id) if recall.decision == "graft" else None), recall.decision

    scores = []
    for skill in [name] if name is not None else memory.store.skill_names():
        version, queries = skill_eval_queries(memory.store, skill, held_out_only=held_out_only)
        if queries:
            scores.append(score_triggers(skill, version, queries, routed, held_out_only=held_out_only))
    return scores
