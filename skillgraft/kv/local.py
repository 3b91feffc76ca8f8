"""An in-process engine's one context as a :class:`~skillgraft.kv.backend.KVBackend`.

The llama.cpp engine and the fake mix in :class:`LocalContext`: their one
:class:`~skillgraft.kv.context.AnswerContext`, told before the engine drops cells.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Callable, Iterator, Optional, Sequence

from ..core.deadline import Deadline
from ..core.sampling import SamplingOptions
from ..core.states import KVState, TokenStep
from .context import AnswerContext
from .prefix_cache import PrefixCache
from .reuse import Reuse

__all__ = ["LocalBackend", "LocalContext"]


class LocalBackend:
    """The cells of an in-process ``engine`` (:class:`~skillgraft.engine.llama.Engine` or the fake)."""

    def __init__(self, engine) -> None:
        self.engine = engine

    @property
    def fingerprint(self):
        return self.engine.fingerprint

    @property
    def n_ctx(self) -> int:
        return self.engine.n_ctx

    def held_cells(self, prompt: Sequence[int]) -> tuple[Optional[Sequence[int]], None]:
        return self.engine.held, None  # an in-process context keeps any number of its cells

    def check(self, state: KVState, block_id: str) -> None:
        self.engine.check_payload(state, block_id, verify_hash=False)

    def evaluate(self, prompt: list[int], reuse: Reuse, block_id: str) -> None:
        engine = self.engine
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

    def generate(self, options: SamplingOptions, prompt: list[int], deadline: Optional[Deadline],
                 reused: Callable[[int], None]) -> Iterator[TokenStep]:
        return self.engine.generate(options)  # the cells reused are those evaluate kept

    def save_prefixes(self, prefixes: Sequence[tuple[int, ...]]) -> list[Optional[bytes]]:
        held = self.engine.held
        return [self.engine.save_prefix(len(prefix))
                if held is not None and tuple(held[: len(prefix)]) == prefix else None for prefix in prefixes]


class LocalContext:
    """Mixed into an in-process engine: its one answer context (made on first use), and the
    notice the engine gives it before it drops cells (``_cells_going``)."""

    _context: Optional[AnswerContext] = None

    @property
    def context(self) -> AnswerContext:
        if self._context is None:
            self._context = AnswerContext(LocalBackend(self))
        return self._context

    def answer_slot(self, prefixes: Optional[PrefixCache] = None):
        """This context, held for one answer, continuing what it holds and the derived states
        of ``prefixes`` (:class:`~skillgraft.kv.context.AnswerContext`)."""
        return nullcontext(self.context.answering(prefixes))

    def settle_derived(self) -> int:
        """Keep now the derived states pending on the context (the cells stay)."""
        return self._context.settle() if self._context is not None else 0

    def _cells_going(self, keeps: int) -> None:
        """The engine keeps only its first ``keeps`` cells next: the context saves what is
        pending on the others first."""
        if self._context is not None:
            self._context.before_drop(keeps)
