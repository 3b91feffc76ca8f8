"""``skillgraft bench skills-effect``: does a skill make the model's function calls better?

BFCL's single-turn Python tasks (:mod:`.bfcl_tasks`), each function document a skill of one
store, answered greedily under five conditions, the same tasks for each:

- ``none``: BFCL's system prompt with no function listed;
- ``pasted``: the documents the task needs pasted after it, as a system turn of their own
  (BFCL's own listing of them);
- ``routed``: the memory's own choice for the question (graft, or abstain where it abstains);
- ``routed-set``: the same with a routed set of up to :data:`SET_SIZE` skills
  (:mod:`skillgraft.routing.skill_sets`: each on its own evidence, in one canonical order);
- ``listing``: the model first picks one document from every skill's name and description,
  then that document is pasted;
- ``all``: every document pasted, where they fit the window.

The skills are stored as text, so a routed skill takes the place a pasted document does (a
system turn after the app's own, :func:`~skillgraft.core.chat_layout.skill_prompt`): where
routing grafts a task's one needed document, the routed and the pasted prompts are the same
tokens, and their answers are compared (:func:`.skills_effect_report.exactness`). Every answer
starts on an empty context, so no condition reuses the cells another one's answer left.

Each answer is checked by BFCL's AST checker; prompt tokens, time to the first streamed token
and total time are measured per answer (:mod:`.skills_effect_report` makes the tables).
"""

from __future__ import annotations

import re
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Optional, Sequence

from ..core.answer import AnswerEnd, AnswerNote, AnswerOptions
from ..core.measures import FirstText
from ..core.progress import Progress
from ..errors import ContextOverflowError, NameTakenError, SkillgraftError
from ..routing.skill_sets import SET_SIZE_SETTING
from .bfcl_tasks import CATEGORIES, BfclChecker, BfclTask, load_tasks
from .skills_effect_report import TaskRun, summarize

__all__ = ["CONDITIONS", "SkillLibrary", "bench_skills_effect", "run_conditions"]

CONDITIONS = ("none", "pasted", "routed", "routed-set", "listing", "all")
SET_SIZE = 3  # SkillsBench finds two or three skills the best number
CHOICE_SLACK = 8  # tokens beyond the longest name for the model's choice of a document
LISTING_PROMPT = (
    "You choose the documentation a function-calling task needs. The documents, one a line as name: description:\n"
    "{listing}\n\nAnswer with the name of the one document the user's request needs, and nothing else."
)


class SkillLibrary:
    """Every function document of the tasks, one skill each: name → (function, document)."""

    def __init__(self, tasks: Sequence[BfclTask], checker: BfclChecker) -> None:
        self.documents: dict[str, tuple[dict, str]] = {}
        self.needs: dict[str, tuple[str, ...]] = {}
        for task in tasks:
            names = {f["name"]: self._add(f, task.id, checker) for f in task.functions}
            self.needs[task.id] = tuple(names[f["name"]] for f in task.needed())

    def _add(self, function: dict, task_id: str, checker: BfclChecker) -> str:
        document = checker.tool_document([function])
        for name in (function["name"], f"{function['name']}@{task_id}"):
            if self.documents.setdefault(name, (function, document))[1] == document:
                return name
        raise NameTakenError(f"two documents of {function['name']!r} in task {task_id}")

    def listing(self) -> str:
        return "\n".join(f"{name}: {function.get('description', '')}" for name, (function, _) in self.documents.items())

    def chosen(self, text: str) -> Optional[str]:
        """The skill named first in ``text`` (the longest name where two start together)."""
        found = [(m.start(), -len(name), name) for name in self.documents
                 for m in [re.search(re.escape(name), text)] if m]
        return min(found)[2] if found else None


def _ask(memory, messages, options: AnswerOptions, *, route: bool) -> tuple[str, AnswerNote, AnswerEnd, float, float, tuple]:
    """One streamed answer on a context that holds nothing (it reuses only the prefix states
    earlier answers kept, never the cells the last one left): text, note, end, seconds to the
    first text and in all, and the tokens the answer was prompted with (rendered again once it
    is timed)."""
    memory.engine.reset()
    started, text, note, end = time.perf_counter(), "", None, None
    recall = memory.plan(messages).recall if route else None
    events = FirstText(memory.stream(messages, options, recall=recall, route=route), started)
    for event in events:
        if isinstance(event, AnswerNote):
            note = event
        elif isinstance(event, AnswerEnd):
            end = event
        else:
            text += event
    total = time.perf_counter() - started
    prompt = memory.pipeline().prompt(memory.plan(messages, recall=recall, route=route), options)
    return text, note, end, events.seconds if events.seconds is not None else total, total, prompt.tokens if prompt else ()


@contextmanager
def _set_size(memory, size: int):
    """The memory's routed sets at most ``size`` skills while the block runs (its setting after)."""
    before = memory.store.setting(SET_SIZE_SETTING)
    memory.store.set_setting(SET_SIZE_SETTING, str(size))
    try:
        yield
    finally:
        memory.store.set_setting(SET_SIZE_SETTING, before if before is not None else "1")


def _pasted(base: str, document: Optional[str]) -> list[tuple[str, str]]:
    """The app's system turn, then ``document`` as a system turn of its own (where a routed skill goes)."""
    return [("system", base)] + ([("system", document)] if document else [])


def run_conditions(memory, model: str, tasks: Sequence[BfclTask], checker: BfclChecker, library: SkillLibrary,
                   blocks: dict[str, str], *, conditions: Sequence[str] = CONDITIONS, max_tokens: int = 96,
                   tick: Callable[[], None] = lambda: None) -> list[TaskRun]:
    """Every task under every condition on ``memory`` (whose skills are ``library``'s, block id →
    name in ``blocks``)."""
    options = AnswerOptions(max_tokens=max_tokens, temperature=0.0)
    base = checker.instructions()
    every = checker.tool_document([f for f, _ in library.documents.values()])
    choice = AnswerOptions(max_tokens=CHOICE_SLACK + max(len(memory.engine.tokenize(n, add_bos=False)) for n in library.documents))
    runs = []
    for task in tasks:
        needed = library.needs[task.id]
        for condition in conditions:
            run = TaskRun(model, condition, task.id, task.category, needed)
            try:
                prompt_tokens = ttft = total = 0.0
                document, route = None, False
                if condition == "pasted":
                    document = checker.tool_document(task.needed())
                elif condition == "all":
                    document = every
                elif condition in ("routed", "routed-set"):
                    route = True
                elif condition == "listing":
                    prompt = LISTING_PROMPT.format(listing=library.listing())
                    chat = [("system", prompt), ("user", task.question)]
                    text, _, end, _, total, _ = _ask(memory, chat, choice, route=False)
                    run.chosen = library.chosen(text)
                    prompt_tokens, ttft = end.prompt_tokens, total
                    if run.chosen is not None:
                        document = library.documents[run.chosen][1]
                chat = [*_pasted(base, document), *((r, c) for r, c in task.messages if r != "system")]
                with _set_size(memory, SET_SIZE if condition == "routed-set" else 1):
                    text, note, end, first, whole, run.prompt = _ask(memory, chat, options, route=route)
                run.text, run.decision, run.block = text, note.decision, blocks.get(note.block_id or "")
                run.routed = tuple(blocks.get(skill["block_id"], "") for skill in note.skills)
                run.reused_tokens, run.reused_from = note.cache_n, note.reused_from
                run.prompt_tokens, run.ttft_s, run.total_s = int(prompt_tokens + end.prompt_tokens), ttft + first, total + whole
                run.passed, run.error_type = checker.check(task, text)
            except ContextOverflowError as exc:
                run.fits, run.error = False, str(exc)
            except SkillgraftError as exc:
                run.error = str(exc)
            runs.append(run)
            tick()
    return runs


def bench_skills_effect(models: Sequence[str], *, categories: Sequence[str] = CATEGORIES, per_category: int = 5,
                        conditions: Sequence[str] = CONDITIONS, max_tokens: int = 96, progress: Progress = None,
                        open_memory: Optional[Callable] = None) -> dict:
    """The benchmark on each model, each in a fresh temporary store holding the tasks' documents
    as text skills.

    ``open_memory(home, model)`` opens the memory (default: :meth:`SkillMemory.open` with
    the default embedder)."""
    checker = BfclChecker()
    tasks = load_tasks(tuple(categories), per_category)
    library = SkillLibrary(tasks, checker)
    if open_memory is None:
        from ..memory import SkillMemory

        open_memory = lambda home, model: SkillMemory.open(home, model=model)  # noqa: E731
    total, done, runs = len(models) * len(tasks) * len(conditions), 0, []

    def tick() -> None:
        nonlocal done
        done += 1
        if progress:
            progress(done, total)

    started = time.perf_counter()
    for model in models:
        with tempfile.TemporaryDirectory(prefix="skills-effect-") as folder, open_memory(Path(folder) / "store", model) as memory:
            blocks = {}
            for name, (function, document) in library.documents.items():
                block = memory.add_manual(name, document, description=function.get("description", ""), capture=False)
                blocks[block.id] = name
            runs += run_conditions(memory, model, tasks, checker, library, blocks, conditions=tuple(conditions),
                                   max_tokens=max_tokens, tick=tick)
    return {
        "benchmark": "skills-effect", "models": list(models), "categories": list(categories),
        "per_category": per_category, "conditions": list(conditions), "tasks": len(tasks),
        "skills": len(library.documents), "max_tokens": max_tokens, "seconds": round(time.perf_counter() - started, 1),
        **summarize(runs, tuple(conditions)), "runs": [r.as_dict() for r in runs],
    }
