"""Routing key policies for imported Agent Skills, compared on held-out queries.

Imports every skill folder under ROOT (blocks captured by the fake engine: routing keys do not
depend on the language model, only the split does, and the fake's byte tokens split finer than
a real model's), then routes the queries with the real encoder under three key policies on the
same blocks:

- ``description``: each part keeps only the skill's name and description (resources: their own keys);
- ``headings`` (the importer's policy): plus one key per body part, its heading path;
- ``sentences``: plus every body sentence of the part as an equal key (what ``add-manual`` gives).

Queries: ``--queries FILE`` (a JSON list of ``{"query": ..., "skill": NAME or null}``, null for an
out-of-scope query), else the held-out part of each skill's ``eval_queries.json`` (positives only).
Reported per policy: in-scope top-1 skill accuracy (the skill ranked first), in-scope accuracy at
the default threshold (right skill and not abstained), and the out-of-scope accept rate there.

    .venv/bin/python benchmarks/skill_keys_eval.py ROOT [--queries FILE] [--out docs/data/skill_keys_eval.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from skillgraft.memory import SkillMemory
from skillgraft.memory.skill_evals import EVAL_QUERIES, is_held_out, read_eval_queries
from skillgraft.routing.embedder import Embedder
from skillgraft.routing.router import manual_key_texts, name_key
from skillgraft.testing import FakeEngine

POLICIES = ("description", "headings", "sentences")


def queries_of(memory: SkillMemory, path) -> list[tuple[str, object]]:
    if path:
        return [(item["query"], item.get("skill")) for item in json.loads(Path(path).read_text())]
    found = []
    for name in memory.store.skill_names():
        files = {f["path"]: f["data"] for f in memory.store.skill_files(name, memory.store.skill_default(name), with_data=True)}
        found += [(q, name) for q, positive in read_eval_queries(files.get(EVAL_QUERIES)) if positive and is_held_out(q)]
    return found


def apply_policy(memory: SkillMemory, policy: str) -> None:
    """The ``manual`` keys of every body part as ``policy`` says."""
    for skill in memory.skills():
        for part in skill.parts:
            if part.role != "section":
                continue
            block = memory.get(part.block_id)
            texts = [f"{name_key(skill.name)}: {part.title}"] if part.title and policy != "description" else []
            if policy == "sentences":
                texts += manual_key_texts(block.source.split("\n\n", 1)[1])
            memory.router.replace_keys(block, texts, kind="manual")


def evaluate(memory: SkillMemory, queries) -> dict:
    in_scope = [(q, s) for q, s in queries if s]
    out = [q for q, s in queries if not s]
    top1 = accepted_right = 0
    for query, skill in in_scope:
        ranked = memory.router.rankings([query])[0].scored
        first = memory.skill_of(ranked[0][0]) if ranked else None
        top1 += first == skill
        recall = memory.route(query)
        accepted_right += recall.decision == "graft" and memory.skill_of(recall.block_id) == skill
    false_accept = sum(memory.route(q).decision == "graft" for q in out)
    return {
        "in_scope": len(in_scope), "top1_accuracy": top1 / len(in_scope) if in_scope else None,
        "accuracy_at_threshold": accepted_right / len(in_scope) if in_scope else None,
        "out_of_scope": len(out), "false_accept": false_accept / len(out) if out else None,
        "threshold": memory.router.threshold,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root")
    parser.add_argument("--queries")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as home, SkillMemory(home, engine=FakeEngine(), embedder=Embedder()) as memory:
        report = memory.import_skills(args.root)
        queries = queries_of(memory, args.queries)
        results = {"skills": len(memory.store.skill_names()), "skipped": report.skipped, "queries": len(queries)}
        for policy in POLICIES:
            apply_policy(memory, policy)
            results[policy] = evaluate(memory, queries)
    text = json.dumps(results, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
