"""Each skill's ``evals/evals.json`` answered twice with the memory's model — with the skill
grafted and with no skill — to say what the skill changes: prompt tokens, generated tokens,
time, and the pass rate of the machine-checkable expectations (:mod:`.eval_cases`).

The skill is chosen by name, not by routing, so the comparison is about its content: its
first block (the one ``SkillMemory.get(name)`` returns: the name, the description and the
start of the body) is grafted. The answers are greedy (temperature 0), through the answer
pipeline every door uses, with the gate advisory; they are not written to the ledger (an eval
is not traffic). An answer that cannot be made (say, a prompt too long for the window after
the block) is reported with its error; nothing stops the other evals.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from statistics import fmean
from typing import Optional

from ..core.answer import Answer, AnswerOptions
from ..core.chat_layout import block_size
from ..core.pipeline import AnswerPipeline
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
    and prefilling what follows) or the plain prefill; ``results`` holds one entry per check
    of the eval (True, False, or None where it could not be decided, with ``undecided``)."""

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

    def as_dict(self) -> dict:
        return {**asdict(self), "passed": self.passed, "checked": self.checked}


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
    """A skill's evals answered with and without it (:meth:`AnswerEvals.eval_answers`)."""

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
        """The totals of one side: answers made, checks passed of those decided, the pass
        rate (None without checks), mean tokens and summed seconds."""
        runs = [(e.with_skill if with_skill else e.without_skill) for e in self.evals]
        made = [r for r in runs if not r.error]
        checked = sum(r.checked for r in made)
        passed = sum(r.passed for r in made)
        return {
            "answers": len(made), "errors": len(runs) - len(made), "checks": checked, "passed": passed,
            "pass_rate": passed / checked if checked else None,
            "prompt_tokens": fmean(r.prompt_tokens for r in made) if made else None,
            "prefilled_tokens": fmean(r.prompt_tokens - r.reused_tokens for r in made) if made else None,
            "generated_tokens": fmean(r.generated_tokens for r in made) if made else None,
            "prefill_s": sum(r.prefill_s for r in made), "generate_s": sum(r.generate_s for r in made),
            "total_s": sum(r.total_s for r in made),
        }

    def summary(self) -> dict:
        with_skill, without = self.side(True), self.side(False)

        def delta(key):
            a, b = with_skill[key], without[key]
            return None if a is None or b is None else a - b

        return {
            "with_skill": with_skill, "without_skill": without,
            "delta": {k: delta(k) for k in ("pass_rate", "prompt_tokens", "generated_tokens", "total_s")},
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
    """``eval_answers`` of a memory (which provides ``store``, ``router``, ``engine``, ``plan``
    and its answer slots)."""

    def eval_answers(self, name: Optional[str] = None, *, max_tokens: int = DEFAULT_EVAL_TOKENS,
                     limit: Optional[int] = None, progress: Progress = None) -> list[SkillAnswerEval]:
        """Per skill (or only ``name``) with an ``evals/evals.json``, each eval (the first
        ``limit``) answered with the skill grafted and without, at most ``max_tokens`` each."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise InputError(f"limit must be an int >= 1, got {limit!r}")
        options = AnswerOptions(max_tokens=max_tokens, temperature=0.0)
        suites = []
        for skill in [name] if name is not None else self.store.skill_names():
            version = self.store.skill_default(skill)
            files = {f["path"]: f for f in self.store.skill_files(skill, version)}
            if EVALS_JSON not in files:
                continue
            raw = next(f["data"] for f in self.store.skill_files(skill, version, with_data=True) if f["path"] == EVALS_JSON)
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
        parts = self.store.skill_parts(skill, version)
        block = self.store.get(parts[0]["block_id"]) if parts else None
        report = SkillAnswerEval(skill, version, block.id if block else None, block_size(self.engine, block) if block else 0,
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
        block = None
        try:
            if with_skill:
                block = self.store.get(block_id)
            recall = forced_recall(block, self.router.threshold, "an eval: the skill named" if block else "an eval: no skill")
            plan = self.plan([("user", case.prompt)], recall=recall)
            with self._slot(plan, options) as slot:
                answer = AnswerPipeline(self.engine, gate="advisory").answer(plan, slot, options)
        except SkillgraftError as exc:
            run.error = str(exc)
            return run
        _fill(run, answer)
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
    run.total_s = t.total_s or 0.0
