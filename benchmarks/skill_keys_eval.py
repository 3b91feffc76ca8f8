"""Routing key policies for imported Agent Skills, compared on held-out queries.

Imports every skill folder under ROOT (blocks captured by the fake engine: routing keys do not
depend on the language model, only the split does; the fake's tokens are bytes, so its window
is ``--n-ctx`` bytes, by default 16,384, about what 4,096 tokens of a real model hold for
English prose at ~4 bytes a token) under each key policy of the importer
(``memory.skills.import_folders(..., keys=...)``; the same blocks each time, a new version of each
skill with that policy's keys), then routes the queries with the real encoder:

- ``description``: each body part keeps only the skill's name and description;
- ``headings``: plus one key per body part, its heading path;
- ``sentences``: plus every body sentence of the part (heading lines aside) as an equal key;

each with and without the example keys and with and without the near misses the importer takes
from the training half of the skills' ``eval_queries.json`` (its positive and its negative
queries; resources keep their own keys throughout). Each variant is measured at the default
threshold and at one calibrated (``SkillMemory.calibrate``) on that training half only: its
positive queries as in-domain, its negative ones (near misses) as out-of-domain. The held-out
queries never reach the calibration.

Queries: ``--queries FILE``, either ``{"in_scope": [{"query", "skill"}], "out_of_scope": [...]}``
or a list of ``{"query": ..., "skill": NAME or null}``; else the held-out part of each skill's
``eval_queries.json`` (positives only). A label is the skill's stored name, which is its
frontmatter ``name`` (also where it differs from the folder). Queries labelled with a skill that
routing never offers (``disable-model-invocation``) are counted apart: for them abstaining is right.
Reported per variant: ``in_scope_accuracy`` (right skill first and not abstained), ``top1`` (right
skill ranked first, whatever the threshold), ``out_of_scope_abstain``, ``disabled_abstain``,
``right`` (right answers over every query: the right skill, or an abstention where none is
right), ``near_miss_precision`` (of the queries grafted to a skill that has near misses, the
share labelled with it), and ``trigger`` (``memory.skills.eval_triggers`` summed over the skills: the
held-out half of their own ``eval_queries.json``, positives and negatives).

    .venv/bin/python benchmarks/skill_keys_eval.py ROOT [--queries FILE] [--out docs/data/skill_keys_eval.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from reports import write_report

from skillgraft.memory import SkillMemory
from skillgraft.skills.trigger_evals import EVAL_QUERIES, is_held_out, read_eval_queries
from skillgraft.routing.embedder import Embedder
from skillgraft.skills.plan import KEY_POLICIES
from skillgraft.routing.near_misses import NEAR_MISS
from skillgraft.routing.router import DEFAULT_THRESHOLD, THRESHOLD_SETTING
from skillgraft.testing import FakeEngine

POLICIES = KEY_POLICIES
SWITCHED = ("example", NEAR_MISS)
DEFAULT_N_CTX = 16_384


def read_queries(path) -> list[tuple[str, object]]:
    data = json.loads(Path(path).read_text())
    if isinstance(data, dict):
        return [(i["query"], i["skill"]) for i in data["in_scope"]] + [(q, None) for q in data["out_of_scope"]]
    return [(item["query"], item.get("skill")) for item in data]


def eval_queries(memory: SkillMemory) -> dict[str, list[tuple[str, bool]]]:
    found = {}
    for name in memory.store.skill_names():
        files = {f["path"]: f["data"] for f in memory.store.skill_files(name, memory.store.skill_default(name), with_data=True)}
        found[name] = read_eval_queries(files.get(EVAL_QUERIES))
    return found


def switch_keys(memory: SkillMemory, stored: dict, kinds: set) -> None:
    """Keep of the importer's example and near-miss keys (``stored``: block id -> rows) only ``kinds``."""
    for block_id, rows in stored.items():
        memory.store.replace_routing_keys(block_id, SWITCHED, [r for r in rows if r["kind"] in kinds])


def evaluate(memory: SkillMemory, queries, disabled: set, guarded: set) -> dict:
    in_scope = [(q, s) for q, s in queries if s and s not in disabled]
    to_disabled = [q for q, s in queries if s in disabled]
    out = [q for q, s in queries if not s]
    top1 = right = 0
    for query, skill in in_scope:
        recall = memory.route(query)
        top1 += bool(recall.candidates) and memory.skills.of_block(recall.candidates[0][0]) == skill
        right += recall.decision == "graft" and memory.skills.of_block(recall.block_id) == skill
    abstained = sum(memory.route(q).decision == "abstain" for q in out)
    disabled_abstained = sum(memory.route(q).decision == "abstain" for q in to_disabled)
    to_guarded = [(memory.skills.of_block(r.block_id), s) for r, s in ((memory.route(q), s) for q, s in queries)
                  if r.decision == "graft" and memory.skills.of_block(r.block_id) in guarded]
    scores = memory.skills.eval_triggers()
    trigger = {k: sum(getattr(x, k) for x in scores) for k in ("positives", "negatives", "true_positives", "false_positives")}
    triggered = trigger["true_positives"] + trigger["false_positives"]
    trigger["precision"] = round(trigger["true_positives"] / triggered, 4) if triggered else None
    trigger["recall"] = round(trigger["true_positives"] / trigger["positives"], 4) if trigger["positives"] else None
    return {
        "threshold": round(memory.router.threshold, 4),
        "in_scope_accuracy": round(right / len(in_scope), 4) if in_scope else None,
        "top1": round(top1 / len(in_scope), 4) if in_scope else None,
        "out_of_scope_abstain": round(abstained / len(out), 4) if out else None,
        "disabled_abstain": round(disabled_abstained / len(to_disabled), 4) if to_disabled else None,
        "right": round((right + abstained + disabled_abstained) / len(queries), 4) if queries else None,
        "near_miss_precision": round(sum(a == b for a, b in to_guarded) / len(to_guarded), 4) if to_guarded else None,
        "near_miss_grafts": len(to_guarded),
        "trigger": trigger,
    }


def describe(memory: SkillMemory, report, args, parser):
    """The collection's facts, the queries, the calibration's training half and the skills never offered."""
    skills = memory.skills.list()
    disabled = {s.name for s in skills if not s.model_invocable}
    trigger = eval_queries(memory)
    if args.queries:
        queries = read_queries(args.queries)
    else:
        queries = [(q, name) for name, items in trigger.items() for q, positive in items if positive and is_held_out(q)]
    unknown = sorted({s for _, s in queries if s} - {s.name for s in skills})
    if unknown:
        parser.error(f"queries name skills the import did not store: {unknown}")
    train_in = [(q, name) for name, items in trigger.items() for q, positive in items if positive and not is_held_out(q)]
    train_out = [q for items in trigger.values() for q, positive in items if not positive and not is_held_out(q)]
    sections = {s.name: sum(p.role == "section" for p in s.parts) for s in skills}
    results = {
        "skills": len(skills), "blocks": len(memory.blocks.list()), "fake_n_ctx": args.n_ctx,
        "split": {name: n for name, n in sections.items() if n > 1},
        "folder_names": {Path(s.folder).name: s.name for s in skills if Path(s.folder).name != s.name},
        "disabled": sorted(disabled), "skipped": report.skipped,
        "queries": {"in_scope": sum(1 for _, s in queries if s and s not in disabled),
                    "disabled": sum(1 for _, s in queries if s in disabled),
                    "out_of_scope": sum(1 for _, s in queries if not s)},
        "calibration": {"in_domain": len(train_in), "out_of_domain": len(train_out)},
        "variants": [],
    }
    return results, queries, train_in, train_out, disabled


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root")
    parser.add_argument("--queries")
    parser.add_argument("--n-ctx", type=int, default=DEFAULT_N_CTX, help="the fake engine's window, in bytes")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    results: dict = {}
    for policy in POLICIES:
        with tempfile.TemporaryDirectory() as home, SkillMemory(home, engine=FakeEngine(n_ctx=args.n_ctx),
                                                                 embedder=Embedder()) as memory:
            report = memory.skills.import_folders(args.root, keys=policy)
            if not results:
                results, queries, train_in, train_out, disabled = describe(memory, report, args, parser)
            stored = {b.id: [dict(k) for k in memory.store.routing_keys(b.id) if k["kind"] in SWITCHED] for b in memory.blocks.list()}
            results.setdefault("near_misses", sum(r["kind"] == NEAR_MISS for rows in stored.values() for r in rows))
            results.setdefault("examples", sum(r["kind"] == "example" for rows in stored.values() for r in rows))
            guarded = {memory.skills.of_block(b) for b, rows in stored.items() if any(r["kind"] == NEAR_MISS for r in rows)}
            results.setdefault("with_near_misses", sorted(guarded))
            for with_examples in (True, False):
                for with_near_misses in (True, False):
                    switch_keys(memory, stored, {k for k, on in zip(SWITCHED, (with_examples, with_near_misses)) if on})
                    memory.store.set_setting(THRESHOLD_SETTING, repr(DEFAULT_THRESHOLD))
                    at_default = evaluate(memory, queries, disabled, guarded)
                    memory.calibrate(train_in, train_out)
                    calibrated = evaluate(memory, queries, disabled, guarded)
                    results["variants"].append({"policy": policy, "examples": with_examples, "near_misses": with_near_misses,
                                                "default": at_default, "calibrated": calibrated})
    return write_report(results, args.out)


if __name__ == "__main__":
    sys.exit(main())
