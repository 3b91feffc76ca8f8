"""Warming skills: capturing ahead of time the KV state each part of a skill would get on its
first use (:meth:`~.component.Skills.warm`), part by part, in the
caller's thread or in one of its own (:class:`WarmJob`).

A part whose state is kept already is skipped, so a warm that was stopped or interrupted goes
on where it stopped when it is run again. Each part is answered once (one token, nothing
recorded) with its state marked for keeping, then the pending state is saved: a part holds
the context only for that, and a background warm releases its lock between two parts.
"""

from __future__ import annotations

import threading
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from typing import Optional, Sequence

from ..core.answer import AnswerOptions
from ..core.chat_layout import skill_prompt, with_system
from ..core.progress import Progress
from ..core.expiry import expired
from ..errors import BlockNotFoundError, ExpiredError, InputError, SkillNotFoundError
from .versions import skill_record

__all__ = ["SkillWarmReport", "WARM_QUESTION", "WarmJob", "start_warm", "warm_parts"]

WARM_QUESTION = "."  # the user turn a warmed state is captured in front of


@dataclass
class SkillWarmReport:
    """What a warm did, part by part: ``warmed`` (captured now), ``kept`` (its state was kept
    already), ``left_out`` (it does not fit beside the prompt, or its state was not kept, with
    why); ``stopped`` when it was stopped before ``left`` more parts."""

    warmed: list = field(default_factory=list)
    kept: list = field(default_factory=list)
    left_out: list = field(default_factory=list)
    stopped: bool = False
    left: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def warm_plan(memory, names: Sequence[str], system: Optional[str]) -> tuple[list, list]:
    """``(chat, [(skill, part), ...])`` of a warm, or a clear error before anything runs."""
    if memory.states.cache is None:
        raise InputError("derived states are off in this memory (a read-only store, or derived_bytes=0): nothing to warm")
    chat = with_system(system, [("user", WARM_QUESTION)])
    return chat, [(name, part) for name in dict.fromkeys(names) for part in _parts(memory, name)]


def _parts(memory, name: str) -> list:
    """The parts of skill ``name``; a manual (``add_manual``) is a skill of one part. One past
    its expiry is :class:`ExpiredError`, as it is to read: refused before a warm starts."""
    try:
        record = skill_record(memory, name)
    except SkillNotFoundError:
        try:
            block = memory.blocks.get(name)
        except BlockNotFoundError:
            raise SkillNotFoundError(name) from None
        if block.kind != "manual":
            raise
        memory.expiry.live(block)
        return [ManualPart(block.id, block.name)]
    if expired(record.expires_at):
        raise ExpiredError(name, record.expires_at)
    return record.parts


@dataclass(frozen=True)
class ManualPart:
    """A manual warmed as a skill's part: what :func:`warm_part` reads of one."""

    block_id: str
    title: str


def warm_parts(memory, names: Sequence[str], system: Optional[str], progress: Progress = None, *,
               hold=nullcontext, stop: Optional[threading.Event] = None) -> SkillWarmReport:
    """See :meth:`~.component.Skills.warm`; each part is warmed
    inside ``hold()``, and none once ``stop`` is set."""
    chat, parts = warm_plan(memory, names, system)
    return run_warm(memory, chat, parts, progress, hold, stop)


def run_warm(memory, chat: list, parts: list, progress: Progress, hold, stop: Optional[threading.Event]) -> SkillWarmReport:
    report = SkillWarmReport()
    for done, (name, part) in enumerate(parts, 1):
        with hold():
            if stop is not None and stop.is_set():  # asked while waiting for the lock, too
                report.stopped, report.left = True, len(parts) - done + 1
                break
            warm_part(memory, chat, name, part, report)
        if progress:
            progress(done, len(parts))
    return report


def warm_part(memory, chat: list, name: str, part, report: SkillWarmReport) -> None:
    """Warm one part of skill ``name``, noted in ``report``."""
    block = memory.blocks.get(part.block_id)
    entry = {"skill": name, "block_id": block.id, "title": part.title}
    if not block.text_only and chat[0][0] != "system":  # captured ahead: itself the prefix of an app without one
        report.kept.append(entry)
        return
    tokens, mark = skill_prompt(memory.engine, block.source, chat)
    if _held(memory, tokens, mark):
        report.kept.append(entry)
        return
    answer = memory._forced(block, chat, AnswerOptions(max_tokens=1))  # no ledger row, gate advisory
    if answer.note.decision == "fallback":
        report.left_out.append({**entry, "reason": answer.note.reason})
        return
    memory.states.flush()  # an interrupted warm keeps what it made
    if _held(memory, tokens, mark):
        report.warmed.append({**entry, "tokens": mark})
        return
    prefixes = memory.states.cache
    adds = mark - prefixes.kept_length(tokens[:mark])
    if adds < prefixes.min_tokens:
        reason = (f"no state of its own is kept: it adds {adds} tokens to what is kept before it, fewer than the "
                  f"{prefixes.min_tokens} a state is kept for (prefilling them costs less than a restore)")
    else:
        reason = "its state was not kept: the cache's budget is taken by pinned states (skillgraft skills cache)"
    report.left_out.append({**entry, "reason": reason})


def _held(memory, tokens: list, mark: int) -> bool:
    return memory.states.cache.holds(tokens[:mark])


class WarmJob:
    """A warm running in a thread of its own: ``progress`` (parts done, parts in all) while it
    runs, :meth:`stop` (it ends after the part at hand), :meth:`wait` for its report."""

    def __init__(self) -> None:
        self.done = 0
        self.total = 0
        self.report: Optional[SkillWarmReport] = None
        self.error: Optional[BaseException] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    @property
    def progress(self) -> tuple[int, int]:
        return self.done, self.total

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def state(self) -> str:
        """``running``, ``failed`` (:attr:`error`), ``stopped`` (before its last part) or ``done``."""
        if self.running:
            return "running"
        if self.error is not None:
            return "failed"
        return "stopped" if self.report is not None and self.report.stopped else "done"

    def stop(self) -> None:
        """Stop before the next part (run the warm again later to go on)."""
        self._stop.set()

    def wait(self, timeout: Optional[float] = None) -> Optional[SkillWarmReport]:
        """The report once the warm has ended (None while it still runs after ``timeout``
        seconds); what made it fail is raised."""
        if self._thread is not None:
            self._thread.join(timeout)
        if self.running:
            return None
        if self.error is not None:
            raise self.error
        return self.report

    def _tell(self, done: int, total: int) -> None:
        self.done, self.total = done, total


def start_warm(memory, names: Sequence[str], system: Optional[str], lock=None) -> WarmJob:
    """A :class:`WarmJob` of ``names`` behind ``system``, each part warmed holding ``lock``."""
    hold = (lambda: lock) if lock is not None else nullcontext
    chat, parts = warm_plan(memory, names, system)  # in the caller's call: it holds the lock, or needs none
    job = WarmJob()
    job.total = len(parts)

    def run() -> None:
        try:
            job.report = run_warm(memory, chat, parts, job._tell, hold, job._stop)
        except BaseException as exc:  # handed to whoever waits for the job
            job.error = exc

    job._thread = threading.Thread(target=run, name="skillgraft-warm", daemon=True)
    job._thread.start()
    return job
