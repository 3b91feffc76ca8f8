"""AnswerContext: one context's cells answering one request at a time.

Restoring only records the block's state; ``prefill`` then makes the prompt — the block's
kept cells and the tokens after them, or the tokens alone — and reuses the longest beginning
of it already at hand (:func:`~skillgraft.kv.reuse.choose_reuse`): what the cells hold from
their last answer, a derived prefix state, or the block. Only the rest is evaluated. With a
:class:`~skillgraft.kv.prefix_cache.PrefixCache`, a prefix two prompts shared is kept as a
derived state, never evaluated again: once the answer is made it is noted as pending
(:mod:`~skillgraft.kv.pending`, a field of the context) and saved when the backend is about to
drop its cells (:meth:`AnswerContext.before_drop`), when the context idles (a gateway's pool) or
when its owner closes (:meth:`AnswerContext.settle`) — not while an answer waits.

This is the one place reuse and capture are decided; the cells are a
:class:`~skillgraft.kv.backend.KVBackend`: an in-process context or a llama-server slot.
"""

from __future__ import annotations

from typing import Iterator, Optional, Sequence

from ..core.deadline import Deadline
from ..core.sampling import SamplingOptions
from ..core.states import KVState, TokenStep, require_fits
from ..errors import InputError
from .backend import KVBackend
from .pending import PendingCapture, PendingCaptures, keep_due
from .prefix_cache import PrefixCache
from .reuse import Reuse, choose_reuse

__all__ = ["AnswerContext"]


class AnswerContext:
    """An :class:`~skillgraft.protocols.AnswerSlot` over one backend's cells (one answer at a
    time: its owner serialises them). ``reused_cells`` and ``reused_from`` (``slot``,
    ``derived``, ``block`` or ``""``) say what the last prompt kept; ``pending`` holds the
    derived states asked for and not yet saved."""

    def __init__(self, backend: KVBackend) -> None:
        self.backend = backend
        self.pending = PendingCaptures()
        self.prefixes: Optional[PrefixCache] = None
        self.deadline: Optional[Deadline] = None
        self.reused_cells = 0
        self.reused_from = ""
        self._restored: Optional[tuple[KVState, str, int]] = None
        self._planned: Optional[tuple[list[int], Reuse, str]] = None

    def answering(self, prefixes: Optional[PrefixCache] = None, deadline: Optional[Deadline] = None) -> "AnswerContext":
        """This context, ready for one answer with the derived states of ``prefixes`` (its
        backend's stream read no later than ``deadline``)."""
        self.prefixes, self.deadline = prefixes, deadline
        self._restored = self._planned = None
        self.reused_cells, self.reused_from = 0, ""
        return self

    # -- the answer ------------------------------------------------------------------------

    def restore(self, state: KVState, block_id: str, *, keep: int) -> None:
        if not 0 < keep <= state.n_tokens:
            raise InputError(f"keep must be within 1..{state.n_tokens}, got {keep}")
        self.backend.check(state, block_id)
        self._restored = (state, block_id, keep)

    def prefill(self, tokens: Sequence[int]) -> None:
        if not tokens:
            raise InputError("nothing to prefill")
        restored, self._restored = self._restored, None
        block_id = restored[1] if restored else ""
        prompt = [*restored[0].tokens[: restored[2]], *tokens] if restored else [int(t) for t in tokens]
        after = restored[2] if restored else 0  # the block's cells in front of the app's prompt
        require_fits(self.backend, len(prompt) + 1, "the prompt plus one answer token")
        prefixes = self.prefixes
        surely, at_most = self.backend.held_cells(prompt)
        reuse = choose_reuse(
            prompt, held=surely, held_at_most=at_most, block=(restored[0], restored[2]) if restored else None,
            derived=prefixes.lookup(prompt) if prefixes else None,
            capture_at=prefixes.capture_point(prompt, after) if prefixes else 0,
        )
        self.backend.evaluate(prompt, reuse, block_id)
        if prefixes is not None:
            prefixes.remember(prompt, after)
        self._planned = (prompt, reuse, block_id)
        self.reused_cells, self.reused_from = reuse.cells, reuse.source

    def generate(self, options: SamplingOptions) -> Iterator[TokenStep]:
        planned, self._planned = self._planned, None
        if planned is None:
            raise InputError("nothing was prefilled")
        return self._steps(options, *planned)

    def _steps(self, options: SamplingOptions, prompt: list[int], reuse: Reuse, block_id: str) -> Iterator[TokenStep]:
        def reused(cells: int) -> None:
            self.reused_cells, self.reused_from = cells, (reuse.source or "slot") if cells else ""

        try:
            yield from self.backend.generate(options, prompt, self.deadline, reused)
        finally:
            if reuse.capture_at and self.prefixes is not None:
                self.pending.add(PendingCapture(tuple(prompt[: reuse.capture_at]), block_id, self.prefixes))

    # -- derived states pending on the cells ------------------------------------------------

    def before_drop(self, keeps: Optional[int] = 0) -> int:
        """The backend is about to keep only its first ``keeps`` cells: save the pending derived
        states that would not survive it; how many were kept."""
        return keep_due(self.pending.due(keeps), self.backend.save_prefixes, self.backend.fingerprint)

    def settle(self) -> int:
        """Save every pending derived state now (the cells stay); how many were kept."""
        return self.before_drop(None)

    def forget(self) -> None:
        """The cells are gone unseen (a restarted server): drop what is pending on them."""
        self.pending.clear()
