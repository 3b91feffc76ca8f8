"""Expiry of skills and verified solutions: set it, read it, remove what passed it.

An imported skill, a manual or a verified solution may carry an expiry
(:mod:`skillgraft.core.expiry` says what one may be). After it the thing is hidden: never
routed to (the router drops it at route time), never answered from (a recurring question is
not answered by an expired solution, a forced graft of it is :class:`ExpiredError`), and not
listed unless asked (``include_expired``). It is never deleted silently: :meth:`Expiries.prune`
or the usual removal does it. :class:`Expiries` is the memory's component ``memory.expiry``, and
the one reader of what expiry hides that the memory's verbs ask (:meth:`Expiries.visible`,
:meth:`Expiries.live`).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Optional

from ..core.blocks import Block
from ..core.expiry import Deadlines, Expiry, Hidden, expired, expiry_of
from ..errors import ExpiredError, InputError, SharedBaseError

__all__ = ["Expiries", "ExpiryRecord"]


@dataclass(frozen=True)
class ExpiryRecord:
    """The expiry of one thing: an imported ``skill``, a ``manual`` or a ``solution`` (its
    ``block_id``); ``expires_at`` None when it has none."""

    name: str
    kind: str
    expires_at: Optional[str]
    expired: bool
    block_id: Optional[str] = None

    def as_dict(self) -> dict:
        return asdict(self)


class Expiries:
    """``memory.expiry``: set, list and prune expiries, and what they hide now."""

    def __init__(self, memory) -> None:
        self.memory = memory

    def set(self, name: str, at: Optional[Expiry]) -> ExpiryRecord:
        """Give ``name`` (an imported skill's name, else a block of this memory's own store) the
        expiry ``at`` (a time, a duration from now, or a text naming either); None removes it."""
        memory, stamp = self.memory, expiry_of(at)
        if name in memory.store.skill_names():
            memory.store.set_skill_expiry(name, stamp)
            return ExpiryRecord(name, "skill", stamp, expired(stamp))
        block = memory.blocks.get(name)
        if memory.blocks.store_of(block) is not memory.store:
            raise SharedBaseError(name, memory.namespace)
        skill = memory.store.skill_of_block(block.id)
        if skill is not None:
            raise InputError(f"block {block.id} is part of skill {skill!r}: set the skill's expiry "
                             f"(skillgraft skills expire {skill})")
        return record_of(memory.store.set_block_expiry(block, stamp))

    def list(self) -> list[ExpiryRecord]:
        """Everything of this memory's own store that carries an expiry, soonest first."""
        store = self.memory.store
        records = [ExpiryRecord(name, "skill", stamp, expired(stamp)) for name, stamp in store.skill_expiries().items()]
        records += [record_of(block) for block in store.blocks() if block.expires_at is not None]
        return sorted(records, key=lambda r: (r.expires_at, r.name))

    def prune(self) -> list[ExpiryRecord]:
        """Remove every skill and block of this memory's own store whose expiry has passed (an
        expired skill with its blocks, as ``skills.remove`` does); what was removed."""
        now = time.time()
        gone = [record for record in self.list() if expired(record.expires_at, now)]
        for record in gone:
            if record.kind == "skill":
                self.memory.skills.remove(record.name)
            else:
                self.memory.store.remove(record.block_id)
        return gone

    def live(self, block: Block) -> Block:
        """``block`` itself, or :class:`ExpiredError` when it (or the skill it is part of) expired."""
        hidden = self._hidden([block])
        if not hidden.passed:
            return block
        store = self.memory.blocks.store_of(block)
        skill = store.skill_of_block(block.id)
        if hidden.hides(block.id, skill):
            raise (ExpiredError(block.name, block.expires_at) if block.id in hidden.passed
                   else ExpiredError(skill, store.skill_expiries()[skill]))
        return block

    def hidden_skills(self) -> set[str]:
        """The imported skills (of this memory and the base it reads) whose expiry has passed."""
        return set(Deadlines(self._skill_stamps()).passed())

    def visible(self, blocks: list[Block]) -> list[Block]:
        """``blocks`` less those expired, and less the parts of the expired skills."""
        if not blocks:
            return blocks
        hidden = self._hidden(blocks)
        if not hidden.passed:
            return blocks
        return [b for b in blocks if not hidden.hides(b.id, self.memory.blocks.store_of(b).skill_of_block(b.id))]

    def _skill_stamps(self) -> dict[str, str]:
        """The expiries of the imported skills of this memory and the base it reads, by name."""
        return {name: stamp for store in self.memory._stores() for name, stamp in store.skill_expiries().items()}

    def _hidden(self, blocks: list[Block]) -> Hidden:
        """What expiry hides now of ``blocks`` and of the skills of this memory and its base."""
        return Deadlines({**self._skill_stamps(), **{block.id: block.expires_at for block in blocks}}).hidden()


def record_of(block: Block) -> ExpiryRecord:
    return ExpiryRecord(block.name, block.kind, block.expires_at, expired(block.expires_at), block.id)
