"""Confidence-gate and recurrence evaluation on the embedded model.

Part 1 (gate): skill manuals that each hold a few facts; questions about those facts are
answered with the right manual grafted and, as a control, with a wrong manual grafted.
An answer is correct when it contains the expected fact. For each grafted answer the gate
statistic (mean log-probability of the first 8 tokens) is recorded; the report shows how
well thresholds separate correct from wrong answers and what the default gate did.

Part 2 (recurrence): verified questions asked again (case, spacing and punctuation
changed) are answered by lookup; the decoded tokens are compared with plain generation
of the same questions.

    .venv/bin/python benchmarks/gate_eval.py [--out docs/data/gate_eval.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from skillgraft.memory import DEFAULT_GATE_LOGPROB, SkillMemory

MANUALS = {
    "sourdough": (
        "Skill manual: sourdough. Feed the starter 8 hours before mixing. Use 500 g flour, 350 g water, "
        "100 g starter and 10 g salt. Bake in a covered pot at 250 C for 20 minutes.",
        [("How much salt goes into the sourdough?", "10"), ("At what temperature should I bake the sourdough?", "250"),
         ("How much water for the sourdough dough?", "350")],
    ),
    "bike-chain": (
        "Skill manual: bicycle chains. Replace a chain after it stretches 0.5 percent. A 9-speed chain is 6.6 mm "
        "wide. Use a chain tool and a quick link; lubricate it every 300 km.",
        [("How often should I lubricate the chain?", "300"), ("How wide is a 9-speed chain?", "6.6"),
         ("When should a stretched chain be replaced?", "0.5")],
    ),
    "ssh-keys": (
        "Skill manual: SSH keys. Create a key with ssh-keygen -t ed25519. The public key goes into "
        "~/.ssh/authorized_keys on the server, whose permissions must be 600. The default SSH port is 22.",
        [("Which key type should I generate?", "ed25519"), ("What permissions must authorized_keys have?", "600"),
         ("What is the default SSH port?", "22")],
    ),
    "tea": (
        "Skill manual: brewing green tea. Use water at 80 C, never boiling. Steep 3 grams of leaves for "
        "2 minutes. A second infusion needs 30 seconds more.",
        [("What water temperature for green tea?", "80"), ("How many grams of green tea leaves?", "3"),
         ("How long should green tea steep?", "2")],
    ),
}
RECURRING = [
    ("What is 12 * 12?", "144", "print(12 * 12)", "what is 12*12"),
    ("What is 2 to the power of 10?", "1024", "print(2 ** 10)", "WHAT IS 2 TO THE POWER OF 10"),
    ("What is 1,000 + 234?", "1234", "print(1000 + 234)", "what is 1000+234 ?"),
    ("How many seconds are in an hour?", "3600", "print(60 * 60)", "how many seconds are in an hour"),
    ("What is 17 * 23?", "391", "print(17 * 23)", "what  is 17*23"),
    ("What is the sum of 1 to 10?", "55", "print(sum(range(1, 11)))", "What is the sum of 1 to 10"),
    ("What is 7 squared?", "49", "print(7 ** 2)", "what is 7 squared?!"),
    ("What is 100 divided by 8?", "12.5", "print(100 / 8)", "what is 100 divided by 8"),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/data/gate_eval.json")
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home, SkillMemory(home) as memory:
        for name, (text, questions) in MANUALS.items():
            memory.add_manual(name, text, examples=[q for q, _ in questions])
        names = list(MANUALS)
        cases, labels = [], []
        for index, (name, (_, questions)) in enumerate(MANUALS.items()):
            wrong_block = names[(index + 1) % len(names)]
            for question, fact in questions:
                cases += [(question, name, fact), (question, wrong_block, fact)]
                labels += ["right block", "wrong block"]
        calibration = memory.calibrate_gate(cases, max_tokens=args.max_tokens, save=False).as_dict()
        rows = calibration.pop("rows")
        for row, label in zip(rows, labels):
            row["grafted"] = label
        sweep = []
        for t in sorted({r["mean_logprob"] for r in rows}):
            kept = [r for r in rows if r["mean_logprob"] >= t]
            sweep.append({"threshold": t, "kept": len(kept), "kept_right": sum(r["correct"] for r in kept),
                          "wrong_turned_away": sum(1 for r in rows if not r["correct"] and r["mean_logprob"] < t)})
        right = [r["mean_logprob"] for r in rows if r["correct"]]
        wrong = [r["mean_logprob"] for r in rows if not r["correct"]]
        gate = {
            "calibrated": calibration,
            "default_threshold": DEFAULT_GATE_LOGPROB,
            "at_default": {
                "kept_right": sum(1 for v in right if v >= DEFAULT_GATE_LOGPROB),
                "wrong_turned_away": sum(1 for v in wrong if v < DEFAULT_GATE_LOGPROB),
                "right": len(right),
                "wrong": len(wrong),
            },
            "mean_logprob_right": round(sum(right) / len(right), 3) if right else None,
            "mean_logprob_wrong": round(sum(wrong) / len(wrong), 3) if wrong else None,
            "sweep": sweep,
            "rows": rows,
        }
        recurrence = []
        for question, answer, method, again in RECURRING:
            memory.add_solution(question, answer, method=method, verifier="python")
        for question, answer, _, again in RECURRING:
            exact = memory.generate(again)
            plain = list(memory.chat([("user", again)], max_tokens=64))
            recurrence.append({"question": again, "decision": exact.decision, "exact_tokens": exact.decoded_tokens,
                               "exact_right": exact.text == answer, "plain_tokens": len(plain),
                               "plain_right": answer in "".join(s.piece for s in plain)})
        report = {
            "gate": gate,
            "recurrence": {
                "questions": len(recurrence),
                "exact_hits": sum(r["decision"] == "exact" for r in recurrence),
                "exact_decoded_tokens": sum(r["exact_tokens"] for r in recurrence),
                "plain_decoded_tokens": sum(r["plain_tokens"] for r in recurrence),
                "plain_right": sum(r["plain_right"] for r in recurrence),
                "rows": recurrence,
            },
        }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    summary = {k: v for k, v in gate.items() if k not in {"rows", "sweep"}}
    print(json.dumps({"gate": summary, "recurrence": {k: v for k, v in report["recurrence"].items() if k != "rows"}}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
