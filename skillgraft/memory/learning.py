"""Learning from verified answers: a question answered with some skills, its answer checked by a
verifier, kept as experience of those skills (:mod:`skillgraft.routing.experience`).

:meth:`Learning.learn` verifies first (nothing unverified is stored), stores the question and
answer as a solution with no routing key of its own (its answer is given again only for the same
question), then makes the question a key of kind ``experience`` of each skill the answer used,
recording the solution. :class:`Learning` is mixed into :class:`~skillgraft.memory.SkillMemory`.
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

from ..core import telemetry
from ..core.blocks import Block
from ..errors import InputError
from ..routing.experience import EXPERIENCE, experience_rows
from ..store.catalog import utc_now
from ..store.ledger import LedgerEvent
from .blocks import block_in

__all__ = ["Learning"]

MAX_LEARNED_SKILLS = 8  # as many as a routed set holds


class Learning:
    """``learn`` of a memory."""

    def learn(self, question: str, answer: str, *, skills: Sequence[Union[Block, str]], verifier,
              expected: Optional[str] = None, method: Optional[str] = None) -> Block:
        """Verify ``answer`` to ``question`` and keep it as experience of ``skills`` (the blocks
        of this store the answer used: :class:`Block` or what :meth:`get` reads); the solution
        block. ``verifier`` and ``expected`` as for :meth:`add_solution`; a failing verdict
        raises :class:`~skillgraft.errors.VerificationError` and stores nothing. No skill: the
        solution alone (it answers its own question again). The same question and answer again
        adds only the keys not yet stored."""
        blocks = self._learned_skills(skills)
        return telemetry.deposited(self.namespace, lambda: self._learn(question, answer, blocks, verifier, expected,
                                                                         method),
                                   lambda block: [(block.id, block.name)], text=f"{question}\n{answer}")

    def _learned_skills(self, skills) -> list[Block]:
        if isinstance(skills, (str, bytes, Block)):
            raise InputError("skills must be a list of the blocks the answer used")
        skills = list(skills)
        if len(skills) > MAX_LEARNED_SKILLS:
            raise InputError(f"{len(skills)} skills given (at most {MAX_LEARNED_SKILLS})")
        blocks = []
        for ref in skills:
            block = block_in(self.store, ref.id if isinstance(ref, Block) else ref)
            if block.kind == "solution":
                raise InputError(f"block {block.id} is a verified solution, not a skill: experience belongs to skills")
            if all(block.id != b.id for b in blocks):
                blocks.append(block)
        return blocks

    def _learn(self, question, answer, blocks: list[Block], verifier, expected, method) -> Block:
        solution = self._add_solution(question, answer, method, verifier, expected, None, (), False, keyed=False)
        rows = self.router.key_rows([(EXPERIENCE, [solution.question or question])])
        added = sum(self.store.add_routing_keys(block.id, experience_rows(rows, solution, utc_now())) for block in blocks)
        if added:
            self.store.log(LedgerEvent("deposit", decision="experience", block_id=solution.id,
                                       detail={"skills": [block.id for block in blocks], "keys": added}))
        return solution
