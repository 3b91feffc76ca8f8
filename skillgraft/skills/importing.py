"""Importing Agent Skills folders into a memory: :meth:`~.component.Skills.import_folders`.

For each skill folder found (:func:`~skillgraft.skills.scan.scan_for_skills`, the first
root winning a name collision, with a warning): read it as untrusted input
(:func:`~skillgraft.skills.folder.read_skill_folder`); a folder whose manifest equals a
stored version's is unchanged (importing again is a no-op); otherwise plan its parts
(:mod:`.plan`, under the key policy asked for, else the one the skill's default version
records, else the default), embed their keys, store each part as a text block (no model runs:
its KV cells are made where it is first used, after the app's own prompt — see
:func:`~skillgraft.core.chat_layout.skill_prompt`; a part whose text a version of the same
skill already holds reuses that block, and takes this version's keys) and store the version,
which becomes the default; its record names the key policy, so ``update`` keeps it.
A part holds at most :func:`part_chars` characters — about a quarter of the window, some four
characters a token — so that it fits beside an agent's own prompt (the pipeline still checks
that it fits before it places it).
The same folder imported under another key policy is a new version (its blocks reused).
A folder that cannot be imported is skipped with its reason and leaves nothing behind: the
blocks captured for it are removed, and what was stored before is untouched. Stored skills
whose folder under the given paths has vanished are reported, and removed only with
``prune=True``. Progress is counted in skills, their total known once the paths are scanned
(before the first is read); within a skill it moves by fractions as its keys are embedded
(:mod:`.keys`: each distinct text once, those the skill's blocks hold already not at all,
the rest in batches on the encoder's bulk threads). A version's new blocks take their keys in
one transaction. An import runs no model: the window that bounds a part is the
engine's when one is loaded, else the one its settings give.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional, Sequence, Union

from ..engine.models import settings_for
from ..core import telemetry
from ..core.expiry import Expiry, expiry_of
from ..errors import BlockNotFoundError, SkillgraftError, SkillFolderError
from ..store.ledger import LedgerEvent
from .cache import sync_pins
from .folder import SKILL_FILE, SkillFolder, read_skill_folder
from .keys import embed_part_keys
from .plan import IMPORT_KEY_KINDS, PlannedPart, key_policy, plan_parts, recorded_policy
from .scan import scan_for_skills
from .trigger_evals import EVAL_QUERIES, MAX_TRAINING_QUERIES, training_queries
from .versions import remove_versions
from .window_fit import part_chars

MAX_EVAL_EXAMPLES = MAX_TRAINING_QUERIES


@dataclass(frozen=True)
class ImportedSkill:
    """A skill version stored by an import (``reused`` blocks were already held by an earlier version)."""

    name: str
    version: int
    folder: str
    blocks: list
    reused: int
    warnings: list


@dataclass
class SkillImportReport:
    """What :meth:`~.component.Skills.import_folders` did: skills imported (a new version each),
    unchanged, skipped (with the reason), vanished (``removed`` with prune), and warnings."""

    imported: list = field(default_factory=list)
    unchanged: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    vanished: list = field(default_factory=list)
    warnings: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


class SkillImports:
    """The imports into a memory (which provides ``store``, ``router``, ``namespace`` and, for
    its window only, ``_engine`` when one is loaded and ``settings``)."""

    def __init__(self, memory) -> None:
        self.memory = memory
        self.store = memory.store

    def run(
        self, paths: Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]], *, prune: bool = False, progress=None,
        origin: Optional[str] = None, keys: Optional[str] = None, expires: Optional[Expiry] = None,
    ) -> SkillImportReport:
        """Import the skill folders at or under ``paths`` (see :meth:`~.component.Skills.import_folders`)."""
        if keys is not None:
            key_policy(keys)
        stamp = expiry_of(expires)
        return telemetry.deposited(self.memory.namespace,
                                   lambda: self._import_all(paths, prune, progress, origin, keys, stamp),
                                   lambda report: [(item.blocks[0] if item.blocks else None, item.name)
                                                   for item in report.imported])

    def _import_all(self, paths, prune: bool, progress, origin: Optional[str], keys: Optional[str],
                    stamp: Optional[str]) -> SkillImportReport:
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        report = SkillImportReport()
        scan = scan_for_skills(paths)
        report.warnings.extend(scan.notes)
        taken: dict[str, str] = {}
        total = len(scan.folders)
        if progress:
            progress(0, total)
        for done, folder_path in enumerate(scan.folders, 1):
            self._import_path(folder_path, taken, report, origin, keys, _within(progress, done - 1, total))
            if progress:
                progress(done, total)
        if origin is None:
            self._vanished(paths, set(taken), report, prune)
        sync_pins(self.memory)  # a pinned skill's new default version is pinned too
        for item in report.imported:
            self.store.log(LedgerEvent("import", decision="skill", detail={
                "skill": item.name, "version": item.version, "origin": origin or item.folder, "parts": len(item.blocks)}))
        if stamp is not None:
            for name in [item.name for item in report.imported] + [item["name"] for item in report.unchanged]:
                self.store.set_skill_expiry(name, stamp)
        return report

    def _import_path(
        self, folder_path: Path, taken: dict, report: SkillImportReport, origin: Optional[str], keys: Optional[str],
        keyed=None,
    ) -> None:
        """One folder found: read, checked against the names taken so far, imported or skipped."""
        try:
            folder = read_skill_folder(folder_path)
        except SkillFolderError as exc:
            report.skipped.append({"folder": str(folder_path), "reason": exc.reason})
            return
        if folder.name in taken:
            report.warnings.append(
                f"skill {folder.name!r} in {folder_path} is shadowed by the one in {taken[folder.name]} (first found wins)"
            )
            return
        taken[folder.name] = str(folder_path)
        try:
            self._import_one(folder, report, origin, keys, keyed)
        except SkillgraftError as exc:
            report.skipped.append({"folder": str(folder_path), "name": folder.name, "reason": str(exc)})

    def _import_one(self, folder: SkillFolder, report: SkillImportReport, origin: Optional[str],
                    keys: Optional[str], keyed=None) -> None:
        versions = self._versions_of(folder.name)
        if keys is None:
            default = [row for row in versions if row["version"] == self.store.skill_default(folder.name)] if versions else []
            keys = recorded_policy(default[0]) if default else key_policy(None)
        for row in versions:
            if row["manifest_sha256"] == folder.manifest_sha256 and recorded_policy(row) == keys:
                report.unchanged.append({"name": folder.name, "version": row["version"], "folder": origin or str(folder.root)})
                return
        warnings = list(folder.warnings)
        examples, near_misses = eval_examples(folder, warnings)
        most = part_chars(self._window())
        plan = plan_parts(folder, lambda text: len(text) <= most, examples, near_misses, keys, notes=warnings)
        version = self.store.next_skill_version(folder.name)  # never a removed version's number
        stored = self._store_version(folder, version, plan, warnings, origin, keys, keyed)
        report.imported.append(stored)

    def _window(self) -> int:
        """The context window a part must fit: the engine's when one is loaded (or was given),
        else the one the settings give; an import never loads the model for it."""
        if self.memory._engine is not None:
            return self.memory._engine.n_ctx
        return settings_for(self.memory.model, self.memory.settings).n_ctx

    def _versions_of(self, name: str) -> list[dict]:
        versions = self.store.skill_versions(name)
        if versions:
            return versions
        try:
            block = self.store.get(name)
        except BlockNotFoundError:
            return []
        if block.name == name:
            raise SkillFolderError(name, f"the name is taken by block {block.id}, which is not an imported skill")
        return []

    def _store_version(
        self, folder: SkillFolder, version: int, plan: list[PlannedPart], warnings: list, origin: Optional[str], keys: str,
        keyed=None,
    ) -> ImportedSkill:
        """Embed, capture and record one version; on any failure remove what it created."""
        key_rows = embed_part_keys(self.memory.router, folder.name, plan, keyed)  # before anything is stored
        created: list[str] = []
        held: dict = {}  # this version's parts by text (two equal parts are one block): a block held, or a new one's name
        for number, part in enumerate(plan):
            if part.text not in held:
                held[part.text] = self._part_block(folder.name, version, number, part)
        reused = len(plan) - sum(isinstance(name, str) for name in held.values())
        try:
            fresh = [(text, name, folder.description) for text, name in held.items() if isinstance(name, str)]
            for (text, _, _), (block, new) in zip(fresh, self.store.put_texts(fresh)):  # one transaction
                held[text] = block
                if new:
                    created.append(block.id)
            parts = [(number, held[part.text], part) for number, part in enumerate(plan)]
            record = {**skill_record(folder, warnings), "keys": keys}
            self.store.add_skill_version(
                folder.name, version, folder=origin or str(folder.root.resolve()), manifest_sha256=folder.manifest_sha256,
                description=folder.description, record=record,
                files=[(f.path, f.size, f.sha256, folder.data[f.path]) for f in folder.files],
                parts=[(number, block.id, part.role, part.title) for number, block, part in parts],
            )
        except BaseException:
            for block_id in created:
                self.store.remove(block_id)
            raise
        self._set_keys(parts, key_rows, created)
        return ImportedSkill(folder.name, version, origin or str(folder.root), [b.id for _, b, _ in parts], reused, warnings)

    def _set_keys(self, parts: list, key_rows: list, created: list) -> None:
        """Each block's keys: the rows of its parts; a block an earlier version holds has its
        import keys replaced by this version's (its corrections stay)."""
        wanted: dict[str, list] = {}
        for (_, block, _), rows in zip(parts, key_rows):
            wanted.setdefault(block.id, []).extend(rows)
        fresh = {block_id: rows for block_id, rows in wanted.items() if block_id in created and rows}
        if fresh:
            self.store.add_routing_keys_of(fresh)  # one transaction for the new blocks' keys
        for block_id, rows in wanted.items():
            if block_id in created:
                continue
            held = {(k["kind"], k["text"]) for k in self.store.routing_keys(block_id) if k["kind"] in IMPORT_KEY_KINDS}
            if held != {(r["kind"], r["text"]) for r in rows}:
                self.store.replace_routing_keys(block_id, IMPORT_KEY_KINDS, rows)

    def _part_block(self, skill: str, version: int, number: int, part: PlannedPart):
        """A block of this skill holding this very text, or the name a new text block of it takes."""
        same = self.store.find_text(part.text)
        if same is not None:
            if self.store.skill_of_block(same.id) == skill:
                return same
            raise SkillFolderError(skill, f"part {number + 1} is already stored as block {same.id} ({same.name!r})")
        name = part_name(skill, part)
        if self._block_named(name):
            name = f"{name}@v{version}"
        if self._block_named(name):
            raise SkillFolderError(skill, f"the block name {name!r} is taken")
        return name

    def _block_named(self, name: str) -> bool:
        try:
            return self.store.get(name).name == name
        except BlockNotFoundError:
            return False

    def _vanished(self, paths, found: set, report: SkillImportReport, prune: bool) -> None:
        roots = [os.path.realpath(Path(p).expanduser()) for p in paths]
        for name, row in self.store.skill_defaults().items():  # one read, however many skills
            if name in found:
                continue
            where = row["folder"] or ""
            inside = any(where == root or where.startswith(root.rstrip(os.sep) + os.sep) for root in roots)
            if inside and not os.path.isfile(os.path.join(where, SKILL_FILE)):
                removed = False
                if prune:
                    remove_versions(self.store, name)
                    removed = True
                report.vanished.append({"name": name, "folder": where, "removed": removed})


def _within(progress, done: int, total: int):
    """``progress`` within skill ``done + 1`` of ``total``: its share of keys embedded moves the
    count by fractions (two decimals), so a long skill shows progress as its parts are keyed."""
    if progress is None:
        return None

    def keyed(embedded: int, keys: int) -> None:
        if 0 < embedded < keys:
            progress(round(done + embedded / keys, 2), total)
    return keyed


def part_name(skill: str, part: PlannedPart) -> str:
    """``NAME`` for the first part, ``NAME#2`` … for body parts, ``NAME/references/x.md`` (``#2`` …) for resources."""
    base = f"{skill}/{part.title}" if part.role == "resource" else skill
    return base if part.piece == 0 else f"{base}#{part.piece + 1}"


def skill_record(folder: SkillFolder, warnings: list) -> dict:
    """What a version's record holds beside its files and parts."""
    return {
        "frontmatter": folder.frontmatter.as_dict(),
        "model_invocable": folder.frontmatter.model_invocable,
        "scripts": folder.listed("scripts"),
        "assets": folder.listed("assets"),
        "resources": list(folder.resources),
        "warnings": list(warnings),
    }


def eval_examples(folder: SkillFolder, warnings: list) -> tuple[list[str], list[str]]:
    """``(examples, near misses)``: the training part's positive and negative queries of the
    folder's ``eval_queries.json`` (:mod:`.trigger_evals`)."""
    return training_queries(folder.data.get(EVAL_QUERIES), warnings, MAX_EVAL_EXAMPLES)
