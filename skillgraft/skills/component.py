"""``memory.skills``: the Agent Skills of one memory, the one face every door calls to import,
read, version, warm, pin and evaluate imported skills.

:class:`Skills` holds no state of its own but the background warms it started; each verb is
the decision of its module (:mod:`.importing`, :mod:`.versions`, :mod:`.warm`, :mod:`.cache`,
:mod:`.trigger_evals`, :mod:`.answer_evals`) over the memory's store, router and engine. The
verbs' names on :class:`~skillgraft.memory.SkillMemory` before this face (:data:`RENAMED`) still
work for one release, with a :class:`DeprecationWarning`.
"""

from __future__ import annotations

import os
import warnings
import weakref
from typing import Optional, Sequence, Union

from ..core.expiry import Expiry
from ..core.progress import Progress
from ..errors import InputError
from .answer_evals import DEFAULT_EVAL_TOKENS, AnswerEvals, SkillAnswerEval
from .cache import CacheReport, cache_report, check_pin, sync_pins
from .importing import SkillImportReport, SkillImports
from .trigger_evals import SkillTriggerScore, eval_triggers
from .versions import SkillExport, SkillRecord, export_files, folder_changes, folder_of, remove_versions
from .versions import skill_contents, skill_record
from .warm import SkillWarmReport, WarmJob, start_warm, warm_parts

__all__ = ["RENAMED", "Skills"]

# The verbs' names on SkillMemory before memory.skills, and their names here.
RENAMED = {
    "import_skills": "import_folders", "skill_names": "names", "skill": "get", "skill_of": "of_block",
    "update_skill": "update", "set_default_skill_version": "set_default", "remove_skill": "remove",
    "export_skill": "export", "skill_contents": "contents", "skill_changes": "changes", "warm_skills": "warm",
    "warm_skills_in_background": "warm_in_background", "stop_warming": "stop_warming", "skill_cache": "cache",
    "pin_skill": "pin", "unpin_skill": "unpin", "eval_skills": "eval_triggers", "eval_answers": "eval_answers",
}


class Skills:
    """The imported Agent Skills of ``memory`` (a :class:`~skillgraft.memory.SkillMemory`)."""

    def __init__(self, memory) -> None:
        self.memory = memory
        self._warm_jobs: weakref.WeakSet = weakref.WeakSet()

    # -- import and versions ---------------------------------------------------------------

    def import_folders(
        self, paths: Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]], *, prune: bool = False,
        progress=None, origin: Optional[str] = None, keys: Optional[str] = None, expires: Optional[Expiry] = None,
    ) -> SkillImportReport:
        """Import the skill folders at or under ``paths`` (:mod:`.importing`): each changed
        folder becomes a new, default version; an unchanged one is a no-op.

        ``keys`` is the key policy of the body's parts (:data:`~.plan.KEY_POLICIES`); None keeps
        each skill's recorded one (a new skill gets :data:`~.plan.DEFAULT_KEY_POLICY`).
        ``origin`` is recorded instead of each folder's path (a bundle's skills come from a temp
        folder): such a skill is not compared with a folder on disk, nor updated from one.
        ``expires`` (:mod:`skillgraft.core.expiry`) is set on every skill imported or found
        unchanged; ``prune`` removes the stored skills whose folder under ``paths`` vanished."""
        return SkillImports(self.memory).run(paths, prune=prune, progress=progress, origin=origin, keys=keys,
                                             expires=expires)

    def names(self, *, include_expired: bool = False) -> list[str]:
        """The names of the imported skills, sorted; those past their expiry only with
        ``include_expired`` (every door lists and reads only these)."""
        hidden = set() if include_expired else self.memory.expiry.hidden_skills()
        return [name for name in self.memory.store.skill_names() if name not in hidden]

    def list(self, *, include_expired: bool = False) -> list[SkillRecord]:
        """The default version of every imported skill, by name; those past their expiry only
        with ``include_expired``."""
        return [self.get(name) for name in self.names(include_expired=include_expired)]

    def get(self, name: str, version: Optional[int] = None) -> SkillRecord:
        """Version ``version`` of skill ``name`` (the default one when None)."""
        return skill_record(self.memory, name, version)

    def versions(self, name: str) -> list[SkillRecord]:
        """The record of every version of skill ``name``, oldest first."""
        return [self.get(name, number) for number in self.get(name).versions]

    def of_block(self, block_id: str) -> Optional[str]:
        """The imported skill a block belongs to, or None."""
        return self.memory.store.skill_of_block(block_id)

    def update(self, name: str, *, progress=None) -> SkillImportReport:
        """Read skill ``name``'s folder again: a changed folder becomes a new, default version,
        under the key policy the default version was imported with."""
        return self.import_folders([folder_of(self.memory.store, name)], progress=progress)

    def set_default(self, name: str, version: int) -> SkillRecord:
        """Make ``version`` the one routing offers and :meth:`get` shows."""
        self.memory.store.set_skill_default(name, version)
        sync_pins(self.memory)
        return self.get(name)

    def remove(self, name: str, version: Optional[int] = None) -> list[str]:
        """Remove one version of skill ``name``, or all of them; the blocks no version holds any
        more go with it. Returns the removed block ids."""
        return remove_versions(self.memory.store, name, version)

    def contents(self, name: str, version: Optional[int] = None) -> tuple[int, list[tuple[str, bytes]]]:
        """``(version, [(path, bytes), ...])``: the files of a version of skill ``name`` (the
        default by default) as imported, each path checked to be a plain one inside the skill."""
        return skill_contents(self.memory.store, name, version)

    def file(self, name: str, path: str, version: Optional[int] = None) -> Optional[bytes]:
        """The bytes of file ``path`` of a version of skill ``name`` (the default by default) as
        imported, or None when the version has no such file."""
        store = self.memory.store
        number = store.skill_version(name, version)["version"]
        found = store.skill_files(name, number, with_data=True, path=path)
        return found[0]["data"] if found else None

    def export(self, name: str, dest: Union[str, os.PathLike], version: Optional[int] = None) -> SkillExport:
        """Write skill ``name`` (a version, the default by default) as the folder ``dest/NAME``,
        its files byte for byte as imported. ``dest/NAME`` must not exist yet."""
        number, files = self.contents(name, version)
        return export_files(name, number, files, dest)

    def changes(self) -> list[dict]:
        """Imported skills whose folder on disk is no longer what their default version holds:
        ``{name, version, folder, change}`` with change ``changed``, ``vanished`` or ``unreadable``."""
        return folder_changes(self.memory.store)

    # -- warm and pins ---------------------------------------------------------------------

    def warm(self, names: Sequence[str], *, system: Optional[str] = None, app: Optional[str] = None,
             progress: Progress = None) -> SkillWarmReport:
        """Capture now what the first use of each part of skills ``names`` would: its KV state
        behind the app's ``system`` prompt, or that of the stored app ``app``
        (``memory.apps.add``; neither: at the start of the chat), kept
        as a prefix state. A part whose state is kept already is skipped, so a warm that was
        interrupted goes on where it stopped; ``progress(done, total)`` per part."""
        return warm_parts(self.memory, names, self._prefix(system, app), progress)

    def warm_in_background(self, names: Sequence[str], *, system: Optional[str] = None,
                           app: Optional[str] = None, lock=None) -> WarmJob:
        """:meth:`warm` in a thread of its own: the :class:`~.warm.WarmJob` tells its progress
        while it runs and stops it between two parts. Each part is warmed holding ``lock`` (the
        lock the caller's own threads hold around their calls on this memory, which is not
        thread-safe), released between parts so that chats go first. Names and prompt are
        checked before it starts."""
        job = start_warm(self.memory, names, self._prefix(system, app), lock)
        self._warm_jobs.add(job)
        return job

    def stop_warming(self) -> None:
        """Stop the background warms and wait for them (as closing the memory does)."""
        for job in list(self._warm_jobs):
            job.stop()
            try:
                job.wait()
            except Exception:  # the job's own error, told to whoever waits for it
                continue

    def _prefix(self, system: Optional[str], app: Optional[str]) -> Optional[str]:
        """The system prompt a warm is made behind: ``system`` as given, or app ``app``'s; not both."""
        if app is None:
            return system
        if system is not None:
            raise InputError("warm behind an app's stored prefix or a system prompt given here, not both")
        return self.memory.apps.get(app).system

    def cache(self) -> CacheReport:
        """Which skills have states kept, their bytes, pins, the budget and how much is used."""
        return cache_report(self.memory.store, self.memory.derived_bytes)

    def pin(self, name: str) -> CacheReport:
        """Keep skill ``name``'s states (those kept now and those captured later) whatever the
        LRU order. Refused (:class:`~skillgraft.errors.PinBudgetError`) when the pinned states of
        a runtime would then be more than the budget."""
        check_pin(self.memory.store, name, self.memory.derived_bytes)
        return self._pinned(name, True)

    def unpin(self, name: str) -> CacheReport:
        """Let skill ``name``'s states be evicted again, oldest use first."""
        return self._pinned(name, False)

    def _pinned(self, name: str, pinned: bool) -> CacheReport:
        self.memory.store.set_skill_pin(name, pinned)
        sync_pins(self.memory)
        return self.cache()

    # -- evals -----------------------------------------------------------------------------

    def eval_triggers(self, name: Optional[str] = None, *, held_out_only: bool = True) -> list[SkillTriggerScore]:
        """Per skill (or only ``name``) with eval queries (``eval_queries.json``), its trigger
        precision and recall (:mod:`.trigger_evals`)."""
        return eval_triggers(self.memory, name, held_out_only=held_out_only)

    def eval_answers(self, name: Optional[str] = None, *, max_tokens: int = DEFAULT_EVAL_TOKENS,
                     limit: Optional[int] = None, progress: Progress = None) -> list[SkillAnswerEval]:
        """Per skill (or only ``name``) with an ``evals/evals.json``, each eval (the first
        ``limit``) answered with the skill grafted and without, at most ``max_tokens`` each
        (:mod:`.answer_evals`)."""
        return AnswerEvals(self.memory).run(name, max_tokens=max_tokens, limit=limit, progress=progress)

    def __call__(self, *, include_expired: bool = False) -> list[SkillRecord]:
        """``memory.skills()``, the old list of records, for one release (warned): use :meth:`list`."""
        warnings.warn("SkillMemory.skills() is deprecated: use memory.skills.list()", DeprecationWarning, stacklevel=2)
        return self.list(include_expired=include_expired)
