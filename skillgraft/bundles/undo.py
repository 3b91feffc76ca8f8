"""What one bundle import stored, noted as it is stored and removed again when a later step of
the same import fails: an import is all or nothing (:mod:`skillgraft.bundles.transfer`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ..errors import SkillgraftError

__all__ = ["ImportUndo"]

logger = logging.getLogger("skillgraft.bundles")


@dataclass
class ImportUndo:
    """The blocks, routing corrections and skill versions an import stored, and the skills'
    defaults it changed; ``before`` is every block id stored before it began."""

    before: set[str]
    blocks: list[str] = field(default_factory=list)
    corrections: list[int] = field(default_factory=list)
    skill_versions: list[tuple[str, int]] = field(default_factory=list)
    defaults: dict[str, int] = field(default_factory=dict)

    def stored(self, block_id: str) -> None:
        """``block_id`` is stored now: noted when this import stored it (not stored before)."""
        if block_id not in self.before and block_id not in self.blocks:
            self.blocks.append(block_id)

    def run(self, memory) -> None:
        """Remove what was noted, newest first, and set the changed defaults back; a step that
        fails is logged and the others still run (the import's own error is what is raised)."""
        steps = [*((f"skill {n!r} v{v}", lambda n=n, v=v: memory.remove_skill(n, v))
                   for n, v in reversed(self.skill_versions)),
                 *((f"the default of skill {n!r}", lambda n=n, v=v: memory.set_default_skill_version(n, v))
                   for n, v in self.defaults.items()),
                 *((f"correction {c}", lambda c=c: memory.store.remove_correction(c)) for c in self.corrections),
                 *((f"block {b}", lambda b=b: memory.store.remove(b)) for b in reversed(self.blocks))]
        for what, step in steps:
            try:
                step()
            except SkillgraftError as exc:
                logger.warning("a failed bundle import could not undo %s: %s", what, exc)
