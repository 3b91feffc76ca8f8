"""Near-miss evaluation: questions close to a verified solution must not get its answer.

Six solutions are verified and deposited (the python verifier runs their methods). Then
near misses are asked — operands, bounds and units changed — each with its own right answer.
A *wrong copy* is an answer that repeats the stored answer of the solution where that answer
is wrong for the question asked. The report counts wrong copies in what the memory returned,
and how many the near-miss rule caught (grafted answers that repeated the stored answer and
were replaced by plain generation: what the memory returned before the rule).

    .venv/bin/python benchmarks/near_miss_eval.py [--out docs/data/near_miss_eval.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time

from skillgraft.memory import SkillMemory, repeats_answer

SOLUTIONS = [
    ("What is 37 * 43?", "1591", "print(37 * 43)"),
    ("What is the sum of the integers from 1 to 100?", "5050", "print(sum(range(1, 101)))"),
    ("How many seconds are in 3 hours?", "10800", "print(3 * 60 * 60)"),
    ("What is 2 to the power of 10?", "1024", "print(2 ** 10)"),
    ("How many centimetres are in 5 metres?", "500", "print(5 * 100)"),
    ("What is 144 divided by 12?", "12", "print(144 // 12)"),
]
# (query, its right answer, the stored answer it must not copy, kind of change)
NEAR_MISSES = [
    ("What is 37 * 44?", "1628", "1591", "operand"),
    ("What is 38 * 43?", "1634", "1591", "operand"),
    ("What is 37 * 430?", "15910", "1591", "operand"),
    ("What is 37 + 43?", "80", "1591", "operator"),
    ("What is the sum of the integers from 1 to 200?", "20100", "5050", "bound"),
    ("What is the sum of the integers from 1 to 50?", "1275", "5050", "bound"),
    ("What is the sum of the integers from 2 to 100?", "5049", "5050", "bound"),
    ("What is the sum of the even integers from 1 to 100?", "2550", "5050", "bound"),
    ("How many seconds are in 4 hours?", "14400", "10800", "operand"),
    ("How many minutes are in 3 hours?", "180", "10800", "unit"),
    ("How many seconds are in 3 minutes?", "180", "10800", "unit"),
    ("How many milliseconds are in 3 hours?", "10800000", "10800", "unit"),
    ("What is 2 to the power of 11?", "2048", "1024", "operand"),
    ("What is 3 to the power of 10?", "59049", "1024", "operand"),
    ("What is 2 to the power of 9?", "512", "1024", "operand"),
    ("How many millimetres are in 5 metres?", "5000", "500", "unit"),
    ("How many centimetres are in 7 metres?", "700", "500", "operand"),
    ("How many centimetres are in 5 kilometres?", "500000", "500", "unit"),
    ("What is 144 divided by 6?", "24", "12", "operand"),
    ("What is 144 divided by 24?", "6", "12", "operand"),
    ("What is 144 times 12?", "1728", "12", "operator"),
    ("What is 169 divided by 13?", "13", "12", "operand"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/data/near_miss_eval.json")
    parser.add_argument("--max-tokens", type=int, default=48)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as home, SkillMemory(home) as memory:
        for question, answer, method in SOLUTIONS:
            memory.add_solution(question, answer, method=method, verifier="python")
        for query, right, stored, change in NEAR_MISSES:
            started = time.perf_counter()
            result = memory.generate(query, max_tokens=args.max_tokens)
            gate = result.gate
            copied = repeats_answer(result.text, stored, query) and stored != right
            rows.append({
                "query": query,
                "change": change,
                "routed": result.recall.decision,
                "routed_block": result.recall.block.name if result.recall.block else None,
                "near_miss": result.recall.near_miss,
                "decision": result.decision,
                "text": result.text,
                "right": repeats_answer(result.text, right, query),
                "wrong_copy": copied,
                "caught_copy": gate is not None and gate.fell_back and gate.reason.startswith("near miss"),
                "seconds": round(time.perf_counter() - started, 3),
            })
            print(json.dumps(rows[-1]), file=sys.stderr)
    summary = {
        "near_misses": len(rows),
        "answered_exact": sum(r["decision"] == "exact" for r in rows),
        "wrong_copies": sum(r["wrong_copy"] for r in rows),
        "copies_caught_by_the_rule": sum(r["caught_copy"] for r in rows),
        "routed_to_a_solution": sum(r["routed"] == "graft" for r in rows),
        "right_answers": sum(r["right"] for r in rows),
    }
    with open(args.out, "w") as handle:
        json.dump({"summary": summary, "rows": rows}, handle, indent=1)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
