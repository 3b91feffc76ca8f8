"""The verified flywheel: solve → verify → deposit.

:func:`solve` tries the model's own answer, then seeded best-of-n samples, then the
caller's solver, and deposits the first candidate a verifier (:mod:`skillgraft.verify.verifiers`)
accepts. It drives a :class:`~skillgraft.memory.SkillMemory`; the memory never calls back
into this module.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Callable, Optional

from .store.ledger import LedgerEvent
from .verify.verifiers import Accepted, Verdict, make_verifier, output_sha256

if TYPE_CHECKING:
    from .memory import SkillMemory


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def extract_answer(text: str) -> str:
    """The last number in ``text``, or its first line when it has none."""
    numbers = _NUMBER.findall(text)
    if numbers:
        return numbers[-1].replace(",", "").rstrip(".")
    return (text.strip().splitlines() or [""])[0].strip()


@dataclass
class SolveResult:
    """What :func:`solve` did, stage by stage."""

    answer: Optional[str]
    verified: bool
    decision: str
    block_id: Optional[str]
    stages: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


Solver = Callable[[str], tuple[str, Optional[str]]]


def solve(
    memory: "SkillMemory",
    problem: str,
    verifier,
    *,
    samples: int = 4,
    max_tokens: int = 96,
    solver: Optional[Solver] = None,
    seed: int = 0,
) -> SolveResult:
    """Base attempt → gate → best-of-n sampling (seeded) → caller's solver; verify, deposit, answer.

    ``verifier`` judges a candidate answer (``method`` is the candidate's text, or the
    solver's method code). The first verified candidate is deposited.
    """
    check = make_verifier(verifier)
    result = SolveResult(None, False, "unsolved", None)
    recall = memory.recall(problem)
    if recall.decision == "exact":
        result.stages.append({"stage": "exact", "decoded_tokens": 0})
        result.answer, result.verified, result.decision, result.block_id = recall.block.answer, True, "exact", recall.block.id
        return result

    def attempt(stage: str, answer: str, method: Optional[str], tokens: int, seed_: Optional[int] = None) -> bool:
        verdict = check.check(problem, answer, method) if answer else Verdict(False, check.kind, output_sha256(""), 0.0, "no answer")
        result.stages.append(
            {"stage": stage, "seed": seed_, "answer": answer, "decoded_tokens": tokens, "verified": verdict.ok, "detail": verdict.detail}
        )
        if verdict.ok:
            block = memory.add_solution(problem, answer, method=method, verifier=Accepted(verdict))
            result.answer, result.verified, result.decision, result.block_id = answer, True, stage, block.id
        return verdict.ok

    def attempts():
        base = memory.generate(problem, max_tokens=max_tokens, recall=recall)
        yield "base", extract_answer(base.text), base.text, base.decoded_tokens, None
        for i in range(samples):
            sample = memory.generate(
                problem, max_tokens=max_tokens, temperature=0.8, seed=seed + i, recall=recall, gate=False
            )
            yield "best-of-n", extract_answer(sample.text), sample.text, sample.decoded_tokens, seed + i
        if solver is not None:
            answer, method = solver(problem)
            yield "solver", str(answer).strip(), method, 0, None

    for stage, answer, method, tokens, seed_ in attempts():
        if attempt(stage, answer, method, tokens, seed_):
            break
    memory.store.log(LedgerEvent("solve", decision=result.decision, block_id=result.block_id, detail={"stages": result.stages}))
    return result
