"""Routing key policies for imported Agent Skills, compared on held-out queries.

Imports every skill folder under ROOT (blocks captured by the fake engine: routing keys do not
depend on the language model, only the split does; the fake's tokens are bytes, so its window
is ``--n-ctx`` bytes, by default 16,384, about what 4,096 tokens of a real model hold for
English prose at ~4 bytes a token), then routes the queries with the real encoder under each key
policy on the same blocks:

- ``description``: each body part keeps only the skill's name and description;
- ``headings`` (the importer's policy): plus one key per body part, its heading path;
- ``sentences``: plus every body sentence of the part as an equal key (what ``add-manual`` gives);

each with and without the example keys the importer takes from the training half of the skills'
``eval_queries.json`` (resources keep their own keys throughout). Each variant is measured at the
default threshold and at one calibrated (``SkillMemory.calibrate``) on that training half only:
its positive queries as in-domain, its negative ones (near misses) as out-of-domain. The held-out
queries never reach the calibration.

Queries: ``--queries FILE``, either ``{"in_scope": [{"query", "skill"}], "out_of_scope": [...]}``
or a list of ``{"query": ..., "skill": NAME or null}``; else the held-out part of each skill's
``eval_queries.json`` (positives only). A label is the skill's stored name, which is its
frontmatter ``name`` (also where it differs from the folder). Queries labelled with a skill that
routing never offers (``disable-model-invocation``) are counted apart: for them abstaining is right.
Reported per variant: ``in_scope_accuracy`` (right skill first and not abstained), ``top1`` (right
skill ranked first, whatever the threshold), ``out_of_scope_abstain``, ``disabled_abstain``.

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
from skillgraft.routing.router import DEFAULT_THRESHOLD, THRESHOLD_SETTING, manual_key_texts, name_key
from skillgraft.testing import FakeEngine

POLICIES = ("description", "headings", "sentences")
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


def apply_policy(memory: SkillMemory, policy: str, examples: dict) -> None:
    """The ``manual`` keys of every body part as ``policy`` says; the example keys as ``examples``."""
    for skill in memory.skills():
        for part in skill.parts:
            if part.role != "section":
                continue
            block = memory.get(part.block_id)
            texts = [f"{name_key(skill.name)}: {part.title}"] if part.title and policy != "description" else []
            if policy == "sentences":
                texts += manual_key_texts(block.source.split("\n\n", 1)[1])
            memory.router.replace_keys(block, texts, kind="manual")
            memory.router.replace_keys(block, examples.get(block.id, []), kind="example")


def evaluate(memory: SkillMemory, queries, disabled: set) -> dict:
    in_scope = [(q, s) for q, s in queries if s and s not in disabled]
    to_disabled = [q for q, s in queries if s in disabled]
    out = [q for q, s in queries if not s]
    top1 = right = 0
    for query, skill in in_scope:
        recall = memory.route(query)
        top1 += bool(recall.candidates) and memory.skill_of(recall.candidates[0][0]) == skill
        right += recall.decision == "graft" and memory.skill_of(recall.block_id) == skill
    abstained = sum(memory.route(q).decision == "abstain" for q in out)
    return {
        "threshold": round(memory.router.threshold, 4),
        "in_scope_accuracy": round(right / len(in_scope), 4) if in_scope else None,
        "top1": round(top1 / len(in_scope), 4) if in_scope else None,
        "out_of_scope_abstain": round(abstained / len(out), 4) if out else None,
        "disabled_abstain": round(sum(memory.route(q).decision == "abstain" for q in to_disabled) / len(to_disabled), 4)
        if to_disabled else None,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root")
    parser.add_argument("--queries")
    parser.add_argument("--n-ctx", type=int, default=DEFAULT_N_CTX, help="the fake engine's window, in bytes")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    engine = FakeEngine(n_ctx=args.n_ctx)
    with tempfile.TemporaryDirectory() as home, SkillMemory(home, engine=engine, embedder=Embedder()) as memory:
        report = memory.import_skills(args.root)
        skills = memory.skills()
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
        imported = {b.id: [k["text"] for k in memory.store.routing_keys(b.id) if k["kind"] == "example"] for b in memory.list()}
        results = {
            "skills": len(skills), "blocks": len(memory.list()), "fake_n_ctx": args.n_ctx,
            "split": {s.name: sum(p.role == "section" for p in s.parts) for s in skills if sum(p.role == "section" for p in s.parts) > 1},
            "folder_names": {Path(s.folder).name: s.name for s in skills if Path(s.folder).name != s.name},
            "disabled": sorted(disabled), "skipped": report.skipped,
            "queries": {"in_scope": sum(1 for _, s in queries if s and s not in disabled),
                        "disabled": sum(1 for _, s in queries if s in disabled),
                        "out_of_scope": sum(1 for _, s in queries if not s)},
            "calibration": {"in_domain": len(train_in), "out_of_domain": len(train_out)},
            "variants": [],
        }
        for policy in POLICIES:
            for with_examples in (True, False):
                apply_policy(memory, policy, imported if with_examples else {})
                memory.store.set_setting(THRESHOLD_SETTING, repr(DEFAULT_THRESHOLD))
                at_default = evaluate(memory, queries, disabled)
                memory.calibrate(train_in, train_out)
                calibrated = evaluate(memory, queries, disabled)
                results["variants"].append({"policy": policy, "examples": with_examples,
                                            "default": at_default, "calibrated": calibrated})
    text = json.dumps(results, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
