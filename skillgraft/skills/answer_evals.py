"""Each skill's ``evals/evals.json`` answered twice with the memory's model (any model: a name
or a GGUF path) — with the skill grafted and with no skill — to say what the skill changes, in
the measures the skills-effect benchmark reports (:mod:`skillgraft.core.measures`): the evals
passed (an answer passes an eval when every check of it passes) with their 95 % interval,
prompt tokens, time to the first token and total time; and the checks passed, the generated
tokens and where the time went (:mod:`.eval_cases` reads and runs the checks).

The skill is chosen by name, not by routing, so the comparison is about its content: its
first block (the one ``memory.blocks.get(name)`` returns: the name, the description and the
start of the body) is grafted. The answers are greedy (temperature 0), through the answer
pipeline every door uses, with the gate advisory; they are not written to the ledger (an eval
is not traffic). An answer that cannot be made (say, a prompt too long for the window after
the block) is reported with its error; nothing stops the other evals.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from statistics import fmean, median
from typing import Optional

from ..core.answer import Answer, AnswerOptions
from ..core.chat_layout import block_size
from ..core.measures import FirstText, answer_costs, pass_rate
from ..core.pipeline import AnswerPipeline, collect
from ..core.planning import forced_recall
from ..core.progress import Progress
from ..errors import InputError, SkillgraftError
from .eval_cases import EVALS_JSON, EvalCase, EvalSuite, read_evals

DEFAULT_EVAL_TOKENS = 128


@dataclass
class EvalAnswer:
    """One answer to an eval's prompt, with the skill (``with_skill``) or without.

    ``prompt_tokens`` is the context before the answer (for a graft: the block's cells kept
    plus the prompt after them), ``reused_tokens`` the cells not prefilled (the restored
    block, or a prefix a context already held); ``prefill_s`` is the graft (restoring the block
    and prefilling what follows) or the plain prefill; ``ttft_s`` and ``total_s`` run from the
    answer's plan to its first text and to its end; ``results`` holds one entry per check of
    the eval (True, False, or None where it could not be decided, with ``undecided``)."""

    with_skill: bool
    decision: str = ""
    block_id: Optional[str] = None
    text: str = ""
    prompt_tokens: int = 0
    reused_tokens: int = 0
    generated_tokens: int = 0
    finish_reason: str = ""
    load_s: float = 0.0
    prefill_s: float = 0.0
    generate_s: float = 0.0
    ttft_s: float = 0.0
    total_s: float = 0.0
    results: list = field(default_factory=list)
    undecided: list = field(default_factory=list)
    reason: str = ""
    error: str = ""

    @property
    def passed(self) -> int:
        return sum(1 for r in self.results if r is True)

    @property
    def checked(self) -> int:
        return sum(1 for r in self.results if r is not None)

    @property
    def passes(self) -> Optional[bool]:
        """Whether every check of the eval passed; None without checks, or with one undecided."""
        return None if not self.results or None in self.results else all(self.results)

    def as_dict(self) -> dict:
        return {**asdict(self), "passed": self.passed, "checked": self.checked, "passes": self.passes}


@dataclass
class EvalOutcome:
    """One eval and its two answers."""

    id: object
    index: int
    prompt: str
    checks: list
    unchecked: list
    invalid: list
    files: list
    with_skill: EvalAnswer
    without_skill: EvalAnswer

    def as_dict(self) -> dict:
        return {
            "id": self.id, "index": self.index, "prompt": self.prompt, "checks": [c.as_dict() for c in self.checks],
            "unchecked": self.unchecked, "invalid": self.invalid, "files": self.files,
            "with_skill": self.with_skill.as_dict(), "without_skill": self.without_skill.as_dict(),
        }


@dataclass
class SkillAnswerEval:
    """A skill's evals answered with and without it (:meth:`~.component.Skills.eval_answers`)."""

    name: str
    version: int
    block_id: Optional[str]
    block_tokens: int
    max_tokens: int
    evals: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    left_out: int = 0

    def side(self, with_skill: bool) -> dict:
        """One side's measures: answers made; ``evals`` — the evals passed of those judged
        (:attr:`EvalAnswer.passes`), with the pass rate and its 95 % interval; the checks
        passed of those decided and their rate (None without checks); mean prompt, prefilled
        and generated tokens; median seconds to the first token, of prefill, generation and
        in all."""
        runs = [(e.with_skill if with_skill else e.without_skill) for e in self.evals]
        made = [r for r in runs if not r.error]
        checked = sum(r.checked for r in made)
        passed = sum(r.passed for r in made)
        return {
            "answers": len(made), "errors": len(runs) - len(made),
            "evals": pass_rate(r.passes for r in made if r.passes is not None),
            "checks": checked, "passed": passed, "pass_rate": passed / checked if checked else None,
            **answer_costs([r.prompt_tokens for r in made], [r.ttft_s for r in made], [r.total_s for r in made]),
            "prefilled_tokens": fmean(r.prompt_tokens - r.reused_tokens for r in made) if made else None,
            "generated_tokens": fmean(r.generated_tokens for r in made) if made else None,
            "prefill_s": median(r.prefill_s for r in made) if made else None,
            "generate_s": median(r.generate_s for r in made) if made else None,
        }

    def summary(self) -> dict:
        """Both sides and their ``delta`` (with the skill less without; ``eval_pass_rate`` the
        evals' pass rate, ``pass_rate`` the checks')."""
        with_skill, without = self.side(True), self.side(False)

        def delta(a, b):
            return None if a is None or b is None else a - b

        keys = ("pass_rate", "prompt_tokens", "generated_tokens", "ttft_s", "total_s")
        return {
            "with_skill": with_skill, "without_skill": without,
            "delta": {"eval_pass_rate": delta(with_skill["evals"]["pass_rate"], without["evals"]["pass_rate"]),
                      **{k: delta(with_skill[k], without[k]) for k in keys}},
            "unchecked": sum(len(e.unchecked) for e in self.evals),
            "invalid": sum(len(e.invalid) for e in self.evals),
        }

    def as_dict(self) -> dict:
        return {
            "name": self.name, "version": self.version, "block_id": self.block_id, "block_tokens": self.block_tokens,
            "max_tokens": self.max_tokens, "evals": [e.as_dict() for e in self.evals], "skipped": self.skipped,
            "warnings": self.warnings, "left_out": self.left_out, "summary": self.summary(),
        }


class AnswerEvals:
    """The answer evals of a memory (which provides ``store``, ``router``, ``engine``, ``plan``
    and its answer slots)."""

    def __init__(self, memory) -> None:
        self.memory = memory

    def run(self, name: Optional[str] = None, *, max_tokens: int = DEFAULT_EVAL_TOKENS,
                     limit: Optional[int] = None, progress: Progress = None) -> list[SkillAnswerEval]:
        """Per skill (or only ``name``) with an ``evals/evals.json``, each eval (the first
        ``limit``) answered with the skill grafted and without, at most ``max_tokens`` each."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise InputError(f"limit must be an int >= 1, got {limit!r}")
        options = AnswerOptions(max_tokens=max_tokens, temperature=0.0)
        suites, store = [], self.memory.store
        for skill in [name] if name is not None else store.skill_names():
            version = store.skill_default(skill)
            files = {f["path"]: f for f in store.skill_files(skill, version)}
            if EVALS_JSON not in files:
                continue
            raw = next(f["data"] for f in store.skill_files(skill, version, with_data=True, path=EVALS_JSON))
            suite = read_evals(raw, files)
            if suite.skill_name is not None and suite.skill_name != skill:
                suite.warnings.append(f"{EVALS_JSON} names skill {suite.skill_name!r}, not {skill!r}")
            suites.append((skill, version, suite))
        total = 2 * sum(len(s.cases[:limit]) for _, _, s in suites)
        done, reports = 0, []
        for skill, version, suite in suites:
            report = self._skill_report(skill, version, suite, options, limit)
            for case in suite.cases[:limit]:
                answers = []
                for with_skill in (True, False):
                    answers.append(self._eval_answer(case, report.block_id if with_skill else None, with_skill, options))
                    done += 1
                    if progress:
                        progress(done, total)
                report.evals.append(EvalOutcome(
                    case.id, case.index, case.prompt, case.checks, case.unchecked, case.invalid, case.files, *answers))
            reports.append(report)
        return reports

    def _skill_report(self, skill: str, version: int, suite: EvalSuite, options: AnswerOptions,
                      limit: Optional[int]) -> SkillAnswerEval:
        memory = self.memory
        parts = memory.store.skill_parts(skill, version)
        block = memory.store.get(parts[0]["block_id"]) if parts else None
        report = SkillAnswerEval(skill, version, block.id if block else None, block_size(memory.engine, block) if block else 0,
                                 options.max_tokens, skipped=suite.skipped, warnings=list(suite.warnings),
                                 left_out=max(0, len(suite.cases) - (limit or len(suite.cases))))
        if block is None:
            report.warnings.append(f"skill {skill!r} v{version} has no block: the with-skill answers are errors")
        return report

    def _eval_answer(self, case: EvalCase, block_id: Optional[str], with_skill: bool,
                     options: AnswerOptions) -> EvalAnswer:
        run = EvalAnswer(with_skill=with_skill)
        if with_skill and block_id is None:
            run.error = "the skill has no block to graft"
            return run
        block, memory = None, self.memory
        started = time.perf_counter()
        try:
            if with_skill:
                block = memory.store.get(block_id)
            recall = forced_recall(block, memory.router.threshold, "an eval: the skill named" if block else "an eval: no skill")
            plan = memory.plan([("user", case.prompt)], recall=recall)
            with memory._slot(plan, options) as slot:
                events = FirstText(AnswerPipeline(memory.engine, gate="advisory").events(plan, slot, options), started)
                answer = collect(plan, events)
        except SkillgraftError as exc:
            run.error = str(exc)
            return run
        _fill(run, answer)
        run.total_s = time.perf_counter() - started
        run.ttft_s = events.seconds if events.seconds is not None else run.total_s
        for check in case.checks:
            passed, why = check.run(run.text)
            run.results.append(passed)
            if why:
                run.undecided.append({"index": check.index, "kind": check.kind, "reason": why})
        return run


def _fill(run: EvalAnswer, answer: Answer) -> None:
    note, end, t = answer.note, answer.end, answer.end.timings
    run.decision, run.block_id, run.text, run.reason = note.decision, note.block_id, answer.text, note.reason
    run.prompt_tokens, run.reused_tokens = end.prompt_tokens, note.prefill_tokens_avoided
    run.generated_tokens, run.finish_reason = end.completion_tokens, end.finish_reason
    run.load_s = t.load_s or 0.0
    run.prefill_s = t.graft_s or t.prefill_s or t.plain_prefill_s or 0.0
    run.generate_s = (t.generate_s or 0.0) + (t.plain_generate_s or 0.0)
