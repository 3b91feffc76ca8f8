"""ContextSlot: an in-process context (the llama.cpp engine or the fake) as an answer slot.

Restoring only records the state; the first ``prefill`` then grafts it — restore at its own
positions, keep its first ``keep`` cells, evaluate the tokens after them — or, with nothing
restored, prefills the tokens from position 0. Generation is the shared sampler
(:mod:`skillgraft.core.sampling`) through the engine's ``generate``.
"""

from __future__ import annotations

from typing import Iterator, Optional, Sequence

from ..errors import InputError
from .sampling import SamplingOptions
from .states import KVState, TokenStep


class ContextSlot:
    """An :class:`~skillgraft.protocols.AnswerSlot` over one in-process engine (not thread-safe:
    the memory that owns the engine serialises its answers)."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.reused_cells = 0
        self._restored: Optional[tuple[KVState, str, int]] = None

    def restore(self, state: KVState, block_id: str, *, keep: int) -> None:
        self.engine.check_payload(state, block_id, verify_hash=False)
        self._restored = (state, block_id, keep)

    def prefill(self, tokens: Sequence[int]) -> None:
        if not tokens:
            raise InputError("nothing to prefill")
        if self._restored is None:
            self.engine.prefill(tokens)
            return
        state, block_id, keep = self._restored
        self._restored = None
        self.engine.graft(state, tokens, block_id, keep=keep, verify_hash=False)
        self.reused_cells = keep

    def generate(self, options: SamplingOptions) -> Iterator[TokenStep]:
        return self.engine.generate(options)
