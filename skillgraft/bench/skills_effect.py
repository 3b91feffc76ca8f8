"""``skillgraft bench skills-effect``: does a skill make the model's function calls better?

BFCL's single-turn Python tasks (:mod:`.bfcl_tasks`), each function document a skill of one
store, answered greedily under five conditions, the same tasks for each:

- ``none``: BFCL's system prompt with no function listed;
- ``pasted``: the documents the task needs pasted after it, as a system turn of their own
  (BFCL's own listing of them);
- ``routed``: the memory's own choice for the question (graft, or abstain where it abstains);
- ``routed-set``: the same with a routed set of up to :data:`SET_SIZE` skills
  (:mod:`skillgraft.routing.skill_sets`: each on its own evidence, in one canonical order);
- ``routed-set+experience``: ``routed-set`` on a memory that learned from the other half of the
  tasks (``--split``, :mod:`.bfcl_select`): each of those answered under ``routed-set``, the
  answers BFCL's checker accepts kept with :meth:`~skillgraft.SkillMemory.learn` as experience
  of the skills they called (:mod:`skillgraft.routing.experience`), after every other condition ran;
- ``listing``: the model first picks one document from every skill's name and description,
  then that document is pasted;
- ``all``: every document pasted, where they fit the window.

``pasted`` pastes what BFCL's prompt lists for the task: the needed documents, or for an
irrelevance task (no function fits; it passes when the answer makes no call) every function
the task offers.

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
from ..errors import ContextOverflowError, InputError, NameTakenError, SkillgraftError
from ..routing.skill_sets import SET_SIZE_SETTING
from .bfcl_select import Selection, select_tasks
from .bfcl_tasks import DEFAULT_CATEGORIES, BfclChecker, BfclTask, BfclVerifier
from .skills_effect_report import TaskRun, summarize

__all__ = ["CONDITIONS", "EXPERIENCE", "SkillLibrary", "bench_skills_effect", "learn_from", "run_conditions", "task_chat"]

EXPERIENCE = "routed-set+experience"
CONDITIONS = ("none", "pasted", "routed", "routed-set", EXPERIENCE, "listing", "all")
SETS = ("routed-set", EXPERIENCE)  # the conditions routed with sets
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
        self._named: dict[str, str] = {}  # document -> its name
        self.needs: dict[str, tuple[str, ...]] = {}
        for task in tasks:
            names = {f["name"]: self._add(f, task.id, checker) for f in task.functions}
            self.needs[task.id] = tuple(names[f["name"]] for f in task.needed())

    def _add(self, function: dict, task_id: str, checker: BfclChecker) -> str:
        document = checker.tool_document([function])
        if document in self._named:  # documented alike by another task, under a name of its own
            return self._named[document]
        for name in (function["name"], f"{function['name']}@{task_id}"):
            if self.documents.setdefault(name, (function, document))[1] == document:
                self._named[document] = name
                return name
        raise NameTakenError(f"two documents of {function['name']!r} in task {task_id}")

    def store(self, memory) -> dict[str, str]:
        """Store every document in ``memory`` as a text skill (its name, the function's
        description its description); block id → document name."""
        blocks = {}
        for name, (function, document) in self.documents.items():
            block = memory.add_manual(name, document, description=function.get("description", ""), capture=False)
            blocks[block.id] = name
        return blocks

    def graft_kind(self, task: BfclTask, block: Optional[str]) -> str:
        """What a routed graft of ``block`` (a document's name; None: abstained) was for ``task``:
        ``needed`` (a document the task needs), ``namesake`` (another task's document of a needed
        function's name: BFCL documents one function many ways), ``offered`` (an irrelevance
        task's own function, which BFCL says does not fit), ``other`` (another function of the
        catalog; for an irrelevance task, one the task was not offered, which may fit the
        question) or ``abstain``."""
        if block is None or block not in self.documents:
            return "abstain"
        if block in self.needs[task.id]:
            return "needed"
        function = self.documents[block][0]["name"]
        if function in {f["name"] for f in task.needed()}:
            return "namesake"
        if task.irrelevant and function in {f["name"] for f in task.functions}:
            return "offered"
        return "other"

    def listing(self) -> str:
        return "\n".join(f"{name}: {function.get('description', '')}" for name, (function, _) in self.documents.items())

    def chosen(self, text: str) -> Optional[str]:
        """The skill named first in ``text`` (the longest name where two start together)."""
        found = [(m.start(), -len(name), name) for name in self.documents
                 for m in [re.search(re.escape(name), text)] if m]
        return min(found)[2] if found else None


def _ask(memory, messages, options: AnswerOptions, *, route: bool) -> tuple[str, AnswerNote, AnswerEnd, float, float, tuple, int]:
    """One streamed answer on a context that holds nothing (it reuses only the prefix states
    earlier answers kept, never the cells the last one left): text, note, end, seconds to the
    first text and in all, the tokens the answer was prompted with (rendered again once it
    is timed) and the verified examples placed beside its skills."""
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
    return (text, note, end, events.seconds if events.seconds is not None else total, total,
            prompt.tokens if prompt else (), len(recall.examples) if recall is not None else 0)


@contextmanager
def _set_size(memory, size: int):
    """The memory's routed sets at most ``size`` skills while the block runs (its setting after)."""
    before = memory.store.setting(SET_SIZE_SETTING)
    memory.store.set_setting(SET_SIZE_SETTING, str(size))
    try:
        yield
    finally:
        memory.store.set_setting(SET_SIZE_SETTING, before if before is not None else "1")


def task_chat(base: str, document: Optional[str], task: BfclTask) -> list[tuple[str, str]]:
    """The app's system turn, then ``document`` as a system turn of its own (where a routed skill
    goes), then the task's chat less its own system turns."""
    return [("system", base), *([("system", document)] if document else []),
            *((r, c) for r, c in task.messages if r != "system")]


def learn_from(memory, tasks: Sequence[BfclTask], checker: BfclChecker, library: SkillLibrary, blocks: dict[str, str], *,
               max_tokens: int = 96, tick: Callable[[], None] = lambda: None) -> dict:
    """Answer ``tasks`` under ``routed-set`` and keep each answer BFCL's checker accepts as
    experience of the routed skills it called (:meth:`~skillgraft.SkillMemory.learn`, the
    checker its verifier); what was learned."""
    options, base = AnswerOptions(max_tokens=max_tokens, temperature=0.0), checker.instructions()
    counts = {"tasks": len(tasks), "passed": 0, "deposited": 0, "with_skills": 0, "errors": 0}
    for task in tasks:
        try:
            with _set_size(memory, SET_SIZE):
                text, note, *_ = _ask(memory, task_chat(base, None, task), options, route=True)
            if checker.check(task, text)[0]:
                counts["passed"] += 1
                called = {name for call in checker.calls(text) for name in call}
                used = [s["block_id"] for s in note.skills
                        if library.documents.get(blocks.get(s["block_id"], ""), ({},))[0].get("name") in called]
                memory.learn(task.question, text, skills=used, verifier=BfclVerifier(checker, task))
                counts["deposited"] += 1
                counts["with_skills"] += bool(used)
        except SkillgraftError:
            counts["errors"] += 1
        tick()
    return counts


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
                    document = checker.tool_document(task.offered())
                elif condition == "all":
                    document = every
                elif condition in ("routed", *SETS):
                    route = True
                elif condition == "listing":
                    prompt = LISTING_PROMPT.format(listing=library.listing())
                    chat = [("system", prompt), ("user", task.question)]
                    text, _, end, _, total, _, _ = _ask(memory, chat, choice, route=False)
                    run.chosen = library.chosen(text)
                    prompt_tokens, ttft = end.prompt_tokens, total
                    if run.chosen is not None:
                        document = library.documents[run.chosen][1]
                with _set_size(memory, SET_SIZE if condition in SETS else 1):
                    text, note, end, first, whole, run.prompt, run.examples = _ask(
                        memory, task_chat(base, document, task), options, route=route)
                run.text, run.decision, run.block = text, note.decision, blocks.get(note.block_id or "")
                if route:
                    run.graft = library.graft_kind(task, run.block if note.decision == "graft" else None)
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


def bench_skills_effect(models: Sequence[str], *, categories: Sequence[str] = DEFAULT_CATEGORIES, per_category: Optional[int] = 5,
                        conditions: Optional[Sequence[str]] = None, max_tokens: int = 96, progress: Progress = None,
                        open_memory: Optional[Callable] = None, tasks: Optional[str] = None, split: Optional[str] = None,
                        seed: int = 0) -> dict:
    """The benchmark on each model, each in a fresh temporary store holding the tasks' documents
    as text skills (both halves' with a ``split``).

    ``tasks``, ``split`` and ``seed`` choose the tasks (:func:`~.bfcl_select.select_tasks`);
    :data:`EXPERIENCE` needs a split (it learns from the other half): ``conditions`` default to
    every one, less that without a split. ``open_memory(home, model)``
    opens the memory (default: :meth:`SkillMemory.open` with the default embedder)."""
    if conditions is None:
        conditions = tuple(c for c in CONDITIONS if split is not None or c != EXPERIENCE)
    unknown = [c for c in conditions if c not in CONDITIONS]
    if unknown:
        raise InputError(f"unknown conditions {unknown}: choose from {', '.join(CONDITIONS)}")
    chosen: Selection = select_tasks(tuple(categories), per_category, tasks=tasks, split=split, seed=seed)
    if EXPERIENCE in conditions and split is None:
        raise InputError(f"{EXPERIENCE} learns from the other half of the tasks: give --split train or test")
    checker = BfclChecker()
    learning = chosen.learn if EXPERIENCE in conditions else ()
    library = SkillLibrary([*chosen.tasks, *learning], checker)
    if open_memory is None:
        from ..memory import SkillMemory

        open_memory = lambda home, model: SkillMemory.open(home, model=model)  # noqa: E731
    total, done, runs, learned = len(models) * (len(chosen.tasks) * len(conditions) + len(learning)), 0, [], {}

    def tick() -> None:
        nonlocal done
        done += 1
        if progress:
            progress(done, total)

    started = time.perf_counter()
    plain = tuple(c for c in conditions if c != EXPERIENCE)
    for model in models:
        with tempfile.TemporaryDirectory(prefix="skills-effect-") as folder, open_memory(Path(folder) / "store", model) as memory:
            blocks = library.store(memory)
            common = dict(max_tokens=max_tokens, tick=tick)
            runs += run_conditions(memory, model, chosen.tasks, checker, library, blocks, conditions=plain, **common)
            if EXPERIENCE in conditions:  # learned after every other condition ran, so none of them sees it
                learned[model] = learn_from(memory, learning, checker, library, blocks, **common)
                runs += run_conditions(memory, model, chosen.tasks, checker, library, blocks, conditions=(EXPERIENCE,),
                                       **common)
    return {
        "benchmark": "skills-effect", "models": list(models),
        "categories": list(dict.fromkeys(t.category for t in chosen.tasks)), "per_category": per_category,
        "tasks_spec": tasks, "split": split, "seed": seed, "conditions": list(conditions), "tasks": len(chosen.tasks),
        "learned_from": len(learning), "learned": learned, "skills": len(library.documents), "max_tokens": max_tokens,
        "seconds": round(time.perf_counter() - started, 1),
        **summarize(runs, tuple(conditions)), "runs": [r.as_dict() for r in runs],
    }
