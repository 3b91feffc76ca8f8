"""A math flywheel agent: solve, verify, deposit; then recurring questions cost a lookup.

For each arithmetic word problem, skillgraft.solve() tries the model first (a greedy attempt,
then best-of-n samples) and, when no attempt verifies, a caller-supplied solver: a small
deterministic program that parses the numbers and computes the answer. A NumericVerifier
holding the ground truth judges every candidate, and only a verified answer is deposited.
One more problem goes in through add_solution(..., verifier="python"), which runs the
solver's method code in the sandbox. Asked again (other case, spacing, punctuation), every
question comes back `exact` with 0 decoded tokens.

Run: .venv/bin/python examples/math_flywheel.py   (embedded SmolLM2-135M, temporary store)
"""

from __future__ import annotations

import re
import tempfile
from collections import Counter

from skillgraft import SkillMemory, VerificationError, solve
from skillgraft.verify import NumericVerifier

# (problem, ground truth)
PROBLEMS = [
    ("A shop sells pencils at 3 dollars each. How much do 14 pencils cost?", 42),
    ("Tom has 125 marbles and gives away 38 of them. How many marbles does he have left?", 87),
    ("A train travels at 60 km per hour for 7 hours. How many km does it travel?", 420),
    ("A farm has 48 cows and buys 27 more. How many cows does it have altogether?", 75),
]
# Deposited with the python verifier instead of solve().
PYTHON_PROBLEM = ("A box holds 24 eggs. How many eggs are in 9 boxes?", 216)

# The same questions, rephrased only in case, spacing and punctuation.
REPHRASED = [
    "a shop sells pencils at 3 dollars each   how much do 14 pencils cost",
    "TOM HAS 125 MARBLES AND GIVES AWAY 38 OF THEM. HOW MANY MARBLES DOES HE HAVE LEFT",
    "A train travels at 60 km per hour for 7 hours: how many km does it travel ?",
    "a farm has 48 cows and buys 27 more; how many cows does it have altogether?",
    "  A box holds 24 eggs!  How many eggs are in 9 boxes  ",
]

_OPERATIONS = [
    (("each", "per", "holds"), "*"),
    (("gives away", "left", "spends", "loses"), "-"),
    (("more", "altogether", "in total"), "+"),
]


def solver(problem: str) -> tuple[str, str]:
    """A tiny deterministic word-problem solver: the first two numbers and a keyword-chosen
    operation. Returns (answer, python code that prints the answer)."""
    a, b = (int(n) for n in re.findall(r"\d+", problem)[:2])
    text = problem.lower()
    op = next(symbol for words, symbol in _OPERATIONS if any(w in text for w in words))
    code = f"a, b = {a}, {b}\nprint(a {op} b)\n"
    answer = {"*": a * b, "-": a - b, "+": a + b}[op]
    return str(answer), code


def main() -> None:
    spent: Counter = Counter()
    with tempfile.TemporaryDirectory(prefix="skillgraft-math-") as home:
        print("loading the embedded model and the embedder ...", flush=True)
        with SkillMemory(home) as memory:
            print("\n== first pass: solve, verify, deposit ==")
            for problem, truth in PROBLEMS:
                result = solve(memory, problem, NumericVerifier(truth), samples=2, max_tokens=48, solver=solver)
                print(f"\n{problem}")
                for stage in result.stages:
                    spent[stage["stage"]] += stage["decoded_tokens"]
                    verdict = "verified" if stage["verified"] else "rejected"
                    print(f"  {stage['stage']:9} answer {stage['answer']!r:8} {stage['decoded_tokens']:3} tokens  {verdict}")
                status = f"deposited as block {result.block_id}" if result.verified else "nothing deposited"
                print(f"  -> {result.answer} ({result.decision}), {status}")

            problem, truth = PYTHON_PROBLEM
            answer, code = solver(problem)
            print(f"\n{problem}")
            try:
                memory.add_solution(problem, str(int(answer) + 1), method=code, verifier="python")
            except VerificationError as exc:
                print(f"  python verifier, wrong answer: refused ({exc})")
            block = memory.add_solution(problem, answer, method=code, verifier="python")
            print(f"  python verifier ran the method: {answer} verified, deposited as block {block.id}")
            assert answer == str(truth)

            print("\n== second pass: the same questions, rephrased ==")
            exact = 0
            for question in REPHRASED:
                out = memory.generate(question)
                spent["second pass"] += out.decoded_tokens
                exact += out.decision == "exact"
                print(f"  [{out.decision}] {question.strip()!r} -> {out.text} ({out.decoded_tokens} decoded tokens)")

            print("\n== decoded tokens per stage ==")
            for stage in ("base", "best-of-n", "solver", "second pass"):
                print(f"  {stage:12} {spent[stage]:4}")
            print(f"\nexact hits: {exact}/{len(REPHRASED)}, decoded tokens on the second pass: {spent['second pass']}")


if __name__ == "__main__":
    main()
