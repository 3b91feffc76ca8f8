"""ContextSlot: an in-process context (the llama.cpp engine or the fake) as an answer slot.

Restoring only records the block's state; ``prefill`` then makes the prompt — the block's
kept cells and the tokens after them, or the tokens alone — and reuses the longest beginning
of it that is already at hand (:func:`~skillgraft.core.prefix_reuse.choose_reuse`): what the
context holds from its last answer, a derived prefix state, or the block. Only the rest is
evaluated. With a :class:`~skillgraft.core.prefix_reuse.PrefixCache`, a prefix two prompts
shared is kept as a derived state (its cells cut from the context, never evaluated again):
noted as pending once the answer is made, and saved when the context is about to lose its
cells or the memory closes (:func:`~.deferred_capture.settle_context`). Generation is the shared sampler (:mod:`skillgraft.core.sampling`)
through the engine's ``generate``.
"""

from __future__ import annotations

from typing import Iterator, Optional, Sequence

from ..errors import InputError
from .deferred_capture import PendingCapture, pending_of
from .prefix_reuse import PrefixCache, Reuse, choose_reuse
from .sampling import SamplingOptions
from .states import KVState, TokenStep


class ContextSlot:
    """An :class:`~skillgraft.protocols.AnswerSlot` over one in-process engine (not thread-safe:
    the memory that owns the engine serialises its answers). ``reused_cells`` and
    ``reused_from`` (``slot``, ``derived``, ``block`` or ``""``) say what the last prefill kept."""

    def __init__(self, engine, prefixes: Optional[PrefixCache] = None) -> None:
        self.engine = engine
        self.prefixes = prefixes
        self.reused_cells = 0
        self.reused_from = ""
        self._restored: Optional[tuple[KVState, str, int]] = None
        self._capture: tuple[tuple[int, ...], str] = ((), "")

    def restore(self, state: KVState, block_id: str, *, keep: int) -> None:
        if not 0 < keep <= state.n_tokens:
            raise InputError(f"keep must be within 1..{state.n_tokens}, got {keep}")
        self.engine.check_payload(state, block_id, verify_hash=False)
        self._restored = (state, block_id, keep)

    def prefill(self, tokens: Sequence[int]) -> None:
        if not tokens:
            raise InputError("nothing to prefill")
        restored, self._restored = self._restored, None
        block_id = restored[1] if restored else ""
        prompt = [*restored[0].tokens[: restored[2]], *tokens] if restored else [int(t) for t in tokens]
        after = restored[2] if restored else 0  # the block's cells in front of the app's prompt
        prefixes = self.prefixes
        reuse = choose_reuse(
            prompt, held=getattr(self.engine, "held", None), block=(restored[0], restored[2]) if restored else None,
            derived=prefixes.lookup(prompt) if prefixes else None,
            capture_at=prefixes.capture_point(prompt, after) if prefixes else 0,
        )
        self._continue(reuse, prompt, block_id)
        if prefixes is not None:
            prefixes.remember(prompt, after)
        self._capture = (tuple(prompt[: reuse.capture_at]), block_id)
        self.reused_cells, self.reused_from = reuse.cells, reuse.source

    def _continue(self, reuse: Reuse, prompt: list[int], block_id: str) -> None:
        """Keep ``reuse.cells`` of the prompt (restoring its state first) and evaluate the rest."""
        engine = self.engine  # (its captures pending on cells it drops are saved first)
        if reuse.source == "block":  # the graft, as without reuse
            engine.graft(reuse.state, prompt[reuse.cells:], block_id, keep=reuse.cells, verify_hash=False)
            return
        if not reuse.source:
            engine.prefill(prompt)
            return
        if reuse.state is not None:
            engine.restore(reuse.state, verify_hash=False)
        if engine.n_past != reuse.cells:
            engine.keep_cells(reuse.cells)
        engine.append(prompt[reuse.cells:])

    def generate(self, options: SamplingOptions) -> Iterator[TokenStep]:
        try:
            yield from self.engine.generate(options)
        finally:
            self._keep_derived()

    def _keep_derived(self) -> None:
        """Note the prefix the prompt shared with an earlier one as pending for the context."""
        prefix, block_id = self._capture
        self._capture = ((), "")
        if prefix and self.prefixes is not None:
            pending_of(self.engine).add(0, PendingCapture(tuple(prefix), block_id, self.prefixes))
