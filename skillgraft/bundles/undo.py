"""What one bundle import stored, noted as it is stored and removed again when a later step of
the same import fails: an import is all or nothing (:mod:`skillgraft.bundles.transfer`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ..errors import BlockNotFoundError, SkillgraftError
from ..skills.plan import IMPORT_KEY_KINDS

__all__ = ["ImportUndo"]

logger = logging.getLogger("skillgraft.bundles")


@dataclass
class ImportUndo:
    """The blocks, routing corrections and skill versions an import stored, the skills' defaults
    it changed and the import keys of their blocks as they were (a new version replaces those
    of the blocks it shares); ``before`` is every block id stored before it began."""

    before: set[str]
    blocks: list[str] = field(default_factory=list)
    corrections: list[int] = field(default_factory=list)
    skill_versions: list[tuple[str, int]] = field(default_factory=list)
    defaults: dict[str, int] = field(default_factory=dict)
    keys: dict[str, list[dict]] = field(default_factory=dict)

    def stored(self, block_id: str) -> None:
        """``block_id`` is stored now: noted when this import stored it (not stored before)."""
        if block_id not in self.before and block_id not in self.blocks:
            self.blocks.append(block_id)

    def skill_stored(self, store, name: str) -> None:
        """Skill ``name`` is stored here already: note its default and its blocks' import keys."""
        self.defaults.setdefault(name, store.skill_default(name))
        for version in store.skill_versions(name):
            for part in store.skill_parts(name, version["version"]):
                if part["block_id"] not in self.keys:
                    self.keys[part["block_id"]] = [k for k in store.routing_keys(part["block_id"])
                                                   if k["kind"] in IMPORT_KEY_KINDS]

    def run(self, memory) -> None:
        """Remove what was noted, newest first, and set the changed defaults and keys back; a
        step that fails is logged and the others still run (the import's own error is raised)."""
        steps = [*((f"skill {n!r} v{v}", lambda n=n, v=v: memory.skills.remove(n, v))
                   for n, v in reversed(self.skill_versions)),
                 *((f"the default of skill {n!r}", lambda n=n, v=v: memory.skills.set_default(n, v))
                   for n, v in self.defaults.items()),
                 *((f"the keys of block {b}", lambda b=b, k=k: _restore_keys(memory.store, b, k))
                   for b, k in self.keys.items()),
                 *((f"correction {c}", lambda c=c: memory.store.remove_correction(c)) for c in self.corrections),
                 *((f"block {b}", lambda b=b: memory.store.remove(b)) for b in reversed(self.blocks))]
        for what, step in steps:
            try:
                step()
            except SkillgraftError as exc:
                logger.warning("a failed bundle import could not undo %s: %s", what, exc)


def _restore_keys(store, block_id: str, rows: list[dict]) -> None:
    """Give ``block_id`` its import keys ``rows`` again, unless it holds them (or is gone)."""
    try:
        store.get(block_id)
    except BlockNotFoundError:
        return
    held = {(k["kind"], k["text"]) for k in store.routing_keys(block_id) if k["kind"] in IMPORT_KEY_KINDS}
    if held != {(k["kind"], k["text"]) for k in rows}:
        store.replace_routing_keys(block_id, IMPORT_KEY_KINDS, rows)
