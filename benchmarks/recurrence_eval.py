"""Recurrence evaluation: verified questions asked again are answered by lookup.

Eight arithmetic questions are verified (the python verifier runs their methods) and
deposited; each is asked again with case, spacing and punctuation changed. The decoded tokens
and right answers of the memory are compared with plain generation of the same questions.

    .venv/bin/python benchmarks/recurrence_eval.py [--out docs/data/recurrence_eval.json]
"""

from __future__ import annotations

import argparse
import sys
import tempfile

from skillgraft import AnswerOptions
from skillgraft.core.planning import forced_recall
from skillgraft.memory import SkillMemory

from reports import write_report

# (question, verified answer, method, the question asked again)
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
    parser.add_argument("--out", default="docs/data/recurrence_eval.json")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as home, SkillMemory(home) as memory:
        for question, answer, method, _ in RECURRING:
            memory.add_solution(question, answer, method=method, verifier="python")
        unrouted = forced_recall(None, memory.router.threshold, "answered plainly for comparison")
        for _, answer, _, again in RECURRING:
            exact = memory.generate(again)
            plain = memory.answer([("user", again)], AnswerOptions(max_tokens=64), recall=unrouted).end.steps
            rows.append({"question": again, "decision": exact.decision, "exact_tokens": exact.decoded_tokens,
                         "exact_right": exact.text == answer, "plain_tokens": len(plain),
                         "plain_right": answer in "".join(s.piece for s in plain)})
    report = {
        "questions": len(rows),
        "exact_hits": sum(r["decision"] == "exact" for r in rows),
        "exact_decoded_tokens": sum(r["exact_tokens"] for r in rows),
        "plain_decoded_tokens": sum(r["plain_tokens"] for r in rows),
        "plain_right": sum(r["plain_right"] for r in rows),
        "rows": rows,
    }
    return write_report(report, args.out)


if __name__ == "__main__":
    sys.exit(main())
