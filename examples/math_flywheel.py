"""A math flywheel agent: solve, verify, deposit; then recurring questions cost a lookup.

For each arithmetic word problem, skillgraft.solve() tries the model first (a greedy attempt,
then best-of-n samples) and, when no attempt verifies, a caller-supplied solver: a small
deterministic program that parses the numbers and computes the answer. A NumericVerifier
holding the ground truth judges every candidate, and only a verified answer is deposited.
One more problem goes in through add_solution(..., verifier="python"), which runs the
solver's method code in the sandbox. Asked again (other case, spacing, punctuation), every
question comes back `exact` with 0 decoded tokens.

The checker (a NumericVerifier holding each question's ground truth) also scores both passes:
the summary gives the pass rate and the decoded tokens of the model alone (its greedy attempt),
of the first pass (the flywheel: model, samples, solver) and of the second pass, once the
verified answers accumulated.

Run: .venv/bin/python examples/math_flywheel.py [--quick]   (embedded SmolLM2-135M, temporary store)
"""

from __future__ import annotations

import argparse
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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="two problems and one sample each")
    args = parser.parse_args()
    problems = PROBLEMS[:2] if args.quick else PROBLEMS
    rephrased = [REPHRASED[i] for i in range(len(PROBLEMS)) if PROBLEMS[i] in problems] + REPHRASED[-1:]
    truths = [truth for _, truth in problems] + [PYTHON_PROBLEM[1]]
    samples = 1 if args.quick else 2
    spent: Counter = Counter()
    first_pass = model_alone = 0
    with tempfile.TemporaryDirectory(prefix="skillgraft-math-") as home:
        print("loading the embedded model and the embedder ...", flush=True)
        with SkillMemory(home) as memory:
            print("\n== first pass: solve, verify, deposit ==")
            for problem, truth in problems:
                result = solve(memory, problem, NumericVerifier(truth), samples=samples, max_tokens=48, solver=solver)
                first_pass += result.verified and NumericVerifier(truth).check(problem, str(result.answer), None).ok
                model_alone += bool(result.stages) and result.stages[0]["stage"] == "base" and result.stages[0]["verified"]
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
            first_pass += answer == str(truth)  # the solver's answer, checked by running its method

            print("\n== second pass: the same questions, rephrased ==")
            exact = second_pass = 0
            for question, truth in zip(rephrased, truths):
                out = memory.generate(question)
                spent["second pass"] += out.decoded_tokens
                exact += out.decision == "exact"
                second_pass += NumericVerifier(truth).check(question, out.text, None).ok
                print(f"  [{out.decision}] {question.strip()!r} -> {out.text} ({out.decoded_tokens} decoded tokens)")

            print("\n== decoded tokens per stage ==")
            for stage in ("base", "best-of-n", "solver", "second pass"):
                print(f"  {stage:12} {spent[stage]:4}")
            n = len(truths)
            first_tokens = spent["base"] + spent["best-of-n"] + spent["solver"]
            print("\n== summary: the checker's verdicts ==")
            print(f"model alone (greedy attempt): pass rate {model_alone}/{n - 1} on the solve() questions, "
                  f"decoded tokens {spent['base']}")
            print(f"first pass (model, samples, solver; verified answers deposited): pass rate {first_pass}/{n}, "
                  f"decoded tokens {first_tokens}")
            print(f"second pass (rephrased, from the memory): pass rate {second_pass}/{n}, "
                  f"decoded tokens {spent['second pass']}")
            print(f"exact hits: {exact}/{n}, decoded tokens on the second pass: {spent['second pass']}")


if __name__ == "__main__":
    main()
