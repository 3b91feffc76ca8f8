"""The memory verbs (list, get, delete, a block's known size) over a memory's own store and,
for a namespace, the base it reads (:mod:`skillgraft.memory.namespaces`): its own blocks first, the base read-only."""

from __future__ import annotations

from typing import Optional, Union

from ..core.blocks import Block
from ..core.chat_layout import block_size
from ..core.planning import forced_recall
from ..core.questions import normalize_question
from ..core.recall import Recall
from ..errors import BlockNotFoundError, InputError, SharedBaseError


class StoreVerbs:
    """Mixed into :class:`~skillgraft.memory.SkillMemory`: ``store`` (its own) and ``base`` (None
    but for a namespace's memory); with what has expired hidden (``memory.expiry``, :class:`~.expiry.Expiries`)."""

    def _stores(self) -> list:
        """The stores this memory reads, its own first: with a namespace, then the base."""
        return [self.store] if self.base is None else [self.store, self.base]

    def store_of(self, block: Block):
        """The store holding ``block``: this memory's own, or the base a namespace reads."""
        if self.base is None:
            return self.store
        try:
            self.store.get(block.id)
            return self.store
        except BlockNotFoundError:
            return self.base

    def known_tokens(self, block: Block) -> Optional[int]:
        """The tokens ``block`` adds to a prompt, without loading a model: a captured block's own
        count; a text block's counted by the engine when one is loaded already, else None."""
        if not block.text_only:
            return block.n_tokens
        engine = getattr(self, "_engine", None)
        return None if engine is None else block_size(engine, block)

    def list(self, kind: Optional[str] = None, *, include_quarantined: bool = False,
             include_expired: bool = False) -> list[Block]:
        """Every block (of ``kind``), oldest first; a namespace's own, then the base's. Those
        past their expiry (or their skill's) only with ``include_expired``."""
        blocks = [block for store in self._stores()
                  for block in store.blocks(kind=kind, include_quarantined=include_quarantined)]
        return blocks if include_expired else self.expiry.visible(blocks)

    def get(self, ref: str) -> Block:
        """A block by id, unique id prefix, name, an imported skill's name (the first block of
        its default version), or the question a solution answers; a namespace's own block
        before the base's."""
        try:
            return block_in(self.store, ref)
        except BlockNotFoundError:
            if self.base is None:
                raise
            return block_in(self.base, ref)

    def forced_graft(self, block: Union[Block, str], named_by: str = "the caller") -> Recall:
        """The recall that grafts ``block`` (a :class:`Block`, or what :meth:`get` reads: a
        namespace's own block, else the base's) whatever routing would say: every forced graft
        (``answer(block=...)``, an adapter's ``block_id``) is made here. One expired, or part of
        an expired skill, is :class:`ExpiredError` (``memory.expiry.live``); one quarantined is answered
        plainly by the pipeline, as a routed one is."""
        block = self.expiry.live(block if isinstance(block, Block) else self.get(block))
        return forced_recall(block, self.router.threshold, f"block {block.name!r} named by {named_by}")

    def delete(self, ref: str) -> Block:
        """Delete a block, its routing keys (a solution's experience keys too) and (when no other
        block shares it) its file. A block of an imported skill is removed with its skill
        (``skills.remove``); a block of the base a namespace reads is :class:`SharedBaseError`."""
        block = self.get(ref)
        if self.store_of(block) is not self.store:
            raise SharedBaseError(ref, self.namespace)
        skill = self.store.skill_of_block(block.id)
        if skill is not None:
            raise InputError(f"block {block.id} is part of skill {skill!r}: remove the skill (skillgraft skills rm {skill})")
        if block.kind == "solution":
            self.forget_experience(block)  # a verified question is no evidence once its solution is gone
        return self.store.remove(block.id)


def block_in(store, ref: str) -> Block:
    """The block ``ref`` names in ``store`` (see :meth:`SkillMemory.get`)."""
    if ref in store.skill_names():
        parts = store.skill_parts(ref, store.skill_default(ref))
        if parts:
            return store.get(parts[0]["block_id"])
    try:
        return store.get(ref)
    except BlockNotFoundError:
        matches = store.solutions_for(normalize_question(ref))
        if matches:
            return matches[0]
        raise
