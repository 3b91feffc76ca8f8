"""Confidence-gate evaluation: does the gate keep right grafts and turn away wrong ones?

Builds the 100-skill store of routing_eval.py on one model. Each test query of the set (6
per skill; ``--queries`` takes fewer) is routed, then grafted with its right block and with one wrong block (the router's
choice when it misroutes, else its runner-up) and, with ``--random``, a random other block;
each without a system prompt and under three app system prompts of different styles. The
first 8 tokens are generated greedily with ``SkillMemory.chat`` and their log-probabilities
recorded with the route score of the grafted block and the route margin (best minus
runner-up score).

Skills are split into a calibration half and a held-out half (fixed seed). On the
calibration half gate_rules.search picks, per family, the rule that keeps >= 95% of the
right-block grafts and turns away the most wrong-block ones; the held-out half reports it
with Wilson 95% intervals. A rule is worth enforcing when on the held-out half it keeps
>= 95% of the right grafts and turns away >= 25% of the wrong ones. Two populations:

- ``every graft``: all grafts, rules on log-probabilities only (a forced graft has no route
  numbers the gate would see);
- ``as routed``: grafts of the block the router chose (decision ``graft`` at the store's
  threshold): right when it routed right, wrong when it misrouted. Here the route score and
  margin are what the gate sees, so rules may read them.

    .venv/bin/python benchmarks/gate_eval.py --random --plot docs/img/gate_eval.png   # docs/data/gate_eval.json
    .venv/bin/python benchmarks/gate_eval.py --model gemma3-270m --queries 3 --out docs/data/gate_eval_gemma3.json
    .venv/bin/python benchmarks/gate_eval.py --rows docs/data/gate_eval.json --out FILE   # re-analyse saved rows
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from dataclasses import astuple, dataclass, fields
from pathlib import Path
from typing import Optional

from skillgraft import AnswerOptions
from skillgraft.core.gate import DEFAULT_GATE_LOGPROB, GATE_TOKENS
from skillgraft.memory import SkillMemory

import numpy as np

from gate_rules import LOGPROBS, ROUTE, Rule, auc, outcome, search
from routing_eval import add_skills, load_data

SEED = 22
MIN_KEPT = 0.95
MEANINGFUL = 0.25  # share of wrong grafts a gate worth enforcing turns away
PARSIMONY = 0.05  # a rule on one number is preferred when it turns away at most this share fewer
SYSTEM_PROMPTS = {
    "none": None,
    "terse": "You are a terse assistant. Answer in one sentence.",
    "persona": ("You are Robin, the friendly helper of a small online shop. Be warm and encouraging, "
                "use plain words, and end with one suggestion for a next step."),
    "markdown": "Format every reply in Markdown: a bold one-line summary, then a numbered list of steps.",
}


@dataclass(frozen=True)
class GraftRow:
    """One graft: the query (skill and test index), the grafted block, and the numbers a gate reads."""

    skill: str
    query_index: int
    block: str
    right: bool
    wrong_kind: Optional[str]  # "misroute", "runner-up" or "random"; None for the right block
    system: str  # a SYSTEM_PROMPTS key
    routed: bool  # the router grafts this very block for this query
    route_score: Optional[float]  # the block's route score (None when not among the router's top 5)
    margin: Optional[float]  # best minus runner-up route score of the query
    mean_logprob: float
    min_logprob: float
    first_logprob: float


def graft_row(memory: SkillMemory, skill: str, index: int, query: str, block: str, recall, kind, system: str) -> GraftRow:
    """Graft ``block`` for ``query`` under ``system`` and read the first tokens' log-probabilities."""
    messages = ([("system", SYSTEM_PROMPTS[system])] if SYSTEM_PROMPTS[system] else []) + [("user", query)]
    steps = memory.answer(messages, AnswerOptions(max_tokens=GATE_TOKENS), block=block, gate="advisory").end.steps
    logprobs = [s.logprob for s in steps]
    names = {memory.blocks.get(b).name: s for b, s in recall.candidates}
    best, runner_up = recall.candidates[0][1], recall.candidates[1][1]
    routed = recall.decision == "graft" and recall.block.name == block
    return GraftRow(skill, index, block, kind is None, kind, system, routed,
                    round(names[block], 4) if block in names else None, round(best - runner_up, 4),
                    round(sum(logprobs) / len(logprobs), 4), round(min(logprobs), 4), round(logprobs[0], 4))


def collect(model: str, intents: dict, with_random: bool, queries: int, progress) -> tuple[list[GraftRow], dict]:
    """Build the store on ``model`` and graft the first ``queries`` test queries of each skill
    with their right and wrong blocks."""
    rows = []
    pick = random.Random(SEED)
    names = sorted(intents)
    with tempfile.TemporaryDirectory() as home, SkillMemory(home, model=model) as memory:
        build_s = add_skills(memory, intents)
        started = time.perf_counter()
        for skill in names:
            for index, query in enumerate(intents[skill]["test"][:queries]):
                recall = memory.route(query)
                top = memory.blocks.get(recall.candidates[0][0]).name
                second = memory.blocks.get(recall.candidates[1][0]).name
                blocks = [(skill, None), (top, "misroute") if top != skill else (second, "runner-up")]
                if with_random:
                    blocks.append((pick.choice([n for n in names if n not in {b for b, _ in blocks}]), "random"))
                for block, kind in blocks:
                    for system in SYSTEM_PROMPTS:
                        rows.append(graft_row(memory, skill, index, query, block, recall, kind, system))
            progress(f"{skill}: {len(rows)} grafts, {time.perf_counter() - started:.0f} s")
        info = {"model": model, "model_name": memory.engine.model_name, "build_s": round(build_s, 1),
                "graft_s": round(time.perf_counter() - started, 1), "route_threshold": memory.router.threshold,
                "queries_per_skill": queries, "random_block": with_random}
    return rows, info


def split(skills: list[str]) -> tuple[set[str], set[str]]:
    """Calibration and held-out halves of the skills (fixed seed)."""
    calibration = set(random.Random(SEED).sample(sorted(skills), len(skills) // 2))
    return calibration, set(skills) - calibration


def _rule(entry: dict) -> Rule:
    return Rule(entry["kind"], entry["a"], entry["t_a"], entry["b"], entry["t_b"], entry["weight"])


def _meets(entry: dict) -> bool:
    """Whether a rule keeps >= MIN_KEPT of the held-out right grafts and turns away >= MEANINGFUL of the wrong."""
    return entry["held_out"]["kept_share"] >= MIN_KEPT and entry["held_out"]["turned_away_share"] >= MEANINGFUL


def _summary(grafts: list[GraftRow], route: bool) -> dict:
    """How well each number alone ranks right above wrong grafts (AUC), and median mean log-probabilities."""
    def median(values):
        return round(float(np.median(values)), 3) if values else None

    return {
        "auc": {name: auc([getattr(g, name) for g in grafts if g.right], [getattr(g, name) for g in grafts if not g.right])
                for name in LOGPROBS + (ROUTE if route else ())},
        "median_mean_logprob": {
            system: {"right": median([g.mean_logprob for g in grafts if g.system == system and g.right]),
                     "wrong": median([g.mean_logprob for g in grafts if g.system == system and not g.right])}
            for system in SYSTEM_PROMPTS
        },
    }


def evaluate(rows: list[GraftRow], route: bool) -> dict:
    """Rules searched on the calibration half, each reported on both halves.

    Named rules: ``best`` (most wrong grafts turned away on calibration), ``log-probabilities
    alone`` (the best of those families) and ``simplest near the best`` (the best rule on one
    number whose calibration share turned away is within PARSIMONY of the best's, else the
    best), and the
    current default threshold; each also per system prompt and per kind of wrong block.
    """
    calibration_skills, _ = split(sorted({r.skill for r in rows}))
    calibration = [r for r in rows if r.skill in calibration_skills]
    held_out = [r for r in rows if r.skill not in calibration_skills]
    found = search(calibration, min_kept=MIN_KEPT, route=route)
    families = [
        {"family": name, **rule.as_dict(), "calibration": result.as_dict(), "held_out": outcome(rule, held_out).as_dict()}
        for name, (rule, result) in sorted(found.items(), key=lambda item: (-item[1][1].turned_away, -item[1][1].kept))
    ]
    best = families[0]
    floor = best["calibration"]["turned_away_share"] - PARSIMONY
    default = Rule("single", "mean_logprob", DEFAULT_GATE_LOGPROB)
    default_entry = {"rule": default.describe(), **default.as_dict(), "calibration": outcome(default, calibration).as_dict(),
                     "held_out": outcome(default, held_out).as_dict()}
    named = {
        "best": best,
        "log-probabilities alone": next(f for f in families if f["family"] in LOGPROBS),
        "simplest near the best": next(
            (f for f in families if f["kind"] == "single" and f["calibration"]["turned_away_share"] >= floor), best),
        "default threshold": default_entry,
    }
    wrong_kinds = sorted({r.wrong_kind for r in held_out if r.wrong_kind})
    return {
        "grafts": len(rows),
        "calibration_grafts": len(calibration),
        "held_out_grafts": len(held_out),
        "rules": {name: {**entry, "meets_goal": _meets(entry)} for name, entry in named.items()},
        "held_out_by_system_prompt": {
            name: {system: outcome(_rule(entry), [r for r in held_out if r.system == system]).as_dict() for system in SYSTEM_PROMPTS}
            for name, entry in named.items()
        },
        "held_out_by_wrong_block": {
            name: {kind: outcome(_rule(entry), [r for r in held_out if r.wrong_kind in (None, kind)]).as_dict() for kind in wrong_kinds}
            for name, entry in named.items()
        },
        "held_out_summary": _summary(held_out, route),
        "families": families,
    }


def analyse(rows: list[GraftRow]) -> dict:
    """Both populations, and what they recommend for the default gate."""
    populations = {"every graft": evaluate(rows, route=False), "as routed": evaluate([r for r in rows if r.routed], route=True)}
    logprob_rules = [p["rules"]["log-probabilities alone"] for p in populations.values() if p["rules"]["log-probabilities alone"]["meets_goal"]]
    route_rule = populations["as routed"]["rules"]["simplest near the best"]
    return {
        "criterion": f"held-out: >= {MIN_KEPT:.0%} of right grafts kept and >= {MEANINGFUL:.0%} of wrong ones turned away",
        "recommendation": {
            "confidence_gate": "enforce " + logprob_rules[0]["rule"] if logprob_rules else "advisory by default",
            "enforceable_rule": route_rule["rule"] if route_rule["meets_goal"] else None,
        },
        "populations": populations,
    }


def plot(rows: list[GraftRow], path: str) -> None:
    """Held-out half: the mean log-probability of right and wrong grafts per system prompt, and
    what a threshold on each number keeps and turns away."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    _, held_out_skills = split(sorted({r.skill for r in rows}))
    held_out = [r for r in rows if r.skill in held_out_skills]
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    systems = list(SYSTEM_PROMPTS)
    for offset, (label, colour, keep) in enumerate((("right block", "tab:green", True), ("wrong block", "tab:red", False))):
        values = [[r.mean_logprob for r in held_out if r.system == s and r.right == keep] for s in systems]
        spots = [i * 3 + offset for i in range(len(systems))]
        parts = left.violinplot(values, positions=spots, widths=0.9, showmedians=True)
        for body in parts["bodies"]:
            body.set_facecolor(colour)
        for lines in ("cbars", "cmins", "cmaxes", "cmedians"):
            parts[lines].set_color(colour)
        left.plot([], [], color=colour, label=label)
    left.axhline(DEFAULT_GATE_LOGPROB, color="grey", linestyle="--", label=f"default threshold {DEFAULT_GATE_LOGPROB}")
    left.set_xticks([i * 3 + 0.5 for i in range(len(systems))], systems)
    left.set_ylabel(f"mean log-probability of the first {GATE_TOKENS} tokens")
    left.set_xlabel("app system prompt")
    left.set_title("every graft, held-out half")
    low = min(r.mean_logprob for r in held_out)
    left.set_ylim(low - 0.45, 0.0)
    left.legend(fontsize=8, loc="lower center", ncol=3)
    routed = [r for r in held_out if r.routed]
    for label, population, name in (("every graft", held_out, "mean_logprob"), ("as routed", routed, "mean_logprob"),
                                    ("as routed", routed, "route_score"), ("as routed", routed, "margin")):
        good = np.array([getattr(r, name) for r in population if r.right])
        bad = np.array([getattr(r, name) for r in population if not r.right])
        cuts = np.sort(np.concatenate([good, bad]))
        right.plot([(bad < t).mean() for t in cuts], [(good >= t).mean() for t in cuts], label=f"{name}, {label}")
    right.plot([0, 1], [1, 0], color="lightgrey", linewidth=0.8, label="no signal")
    right.axhline(MIN_KEPT, color="grey", linestyle=":", label=f"{MIN_KEPT:.0%} of right grafts kept")
    right.set_xlabel("share of wrong-block grafts turned away")
    right.set_ylabel("share of right-block grafts kept")
    right.set_title("one threshold on one number, held-out half")
    right.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def encode_rows(rows: list[GraftRow]) -> dict:
    return {"columns": [f.name for f in fields(GraftRow)], "values": [list(astuple(r)) for r in rows]}


def decode_rows(saved: dict) -> list[GraftRow]:
    return [GraftRow(**dict(zip(saved["columns"], values))) for values in saved["values"]]


def write(report: dict, out: str) -> None:
    """The report as JSON, one graft row per line."""
    rows = report.pop("rows")
    text = json.dumps(report, indent=2)
    lines = ",\n".join("      " + json.dumps(v) for v in rows["values"])
    text = text[:-2] + f',\n  "rows": {{\n    "columns": {json.dumps(rows["columns"])},\n    "values": [\n{lines}\n    ]\n  }}\n}}\n'
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--out", default="docs/data/gate_eval.json")
    parser.add_argument("--random", action="store_true", help="also graft a random other block per query")
    parser.add_argument("--queries", type=int, default=6, help="test queries per skill (of 6)")
    parser.add_argument("--rows", help="re-analyse the graft rows of a saved report instead of grafting")
    parser.add_argument("--plot", help="also draw a PNG of the held-out half (needs matplotlib)")
    args = parser.parse_args()
    if args.rows:
        saved = json.loads(Path(args.rows).read_text())
        rows, info = decode_rows(saved["rows"]), saved["run"]
    else:
        intents = load_data()["intents"]
        rows, info = collect(args.model, intents, args.random, args.queries, lambda line: print(line, file=sys.stderr, flush=True))
    calibration, held_out = split(sorted({r.skill for r in rows}))
    report = {
        "run": info,
        "system_prompts": SYSTEM_PROMPTS,
        "gate_tokens": GATE_TOKENS,
        "split": {"seed": SEED, "calibration_skills": sorted(calibration), "held_out_skills": sorted(held_out)},
        **analyse(rows),
        "rows": encode_rows(rows),
    }
    summary = {name: {rule: {"rule": entry["rule"], **{k: entry["held_out"][k] for k in ("kept_share", "turned_away_share")}}
                      for rule, entry in p["rules"].items()} for name, p in report["populations"].items()}
    write(report, args.out)
    if args.plot:
        plot(rows, args.plot)
    print(json.dumps({"recommendation": report["recommendation"], **summary}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
