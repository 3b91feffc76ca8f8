"""What an :class:`~skillgraft.kv.context.AnswerContext` needs of the cells it answers in.

A :class:`KVBackend` is one context's cells: an in-process engine's context
(:class:`~skillgraft.kv.context.LocalBackend`, for the llama.cpp engine and the fake), or one
llama-server slot (:class:`~skillgraft.server.slot.SlotBackend`). It says what it holds, keeps
a prefix of it (loading a state first), evaluates the rest, generates, and saves prefixes of
its cells; the context makes every decision. Before a backend drops cells for any reason (a
capture, a restore, a reset, a request that keeps fewer cells) it tells its context
(:meth:`~skillgraft.kv.context.AnswerContext.before_drop`), which saves the derived states
still pending on them.
"""

from __future__ import annotations

from typing import Callable, Iterator, Optional, Protocol, Sequence, Union

from ..core.deadline import Deadline
from ..core.fingerprint import RuntimeFingerprint
from ..core.sampling import SamplingOptions
from ..core.states import KVState, TokenStep
from .prefixes import Reuse

__all__ = ["EngineCells", "KVBackend", "Payload"]

# A saved prefix's payload: its bytes, or the call that makes them (a cut of a larger save).
Payload = Union[bytes, Callable[[], bytes]]


class KVBackend(Protocol):
    """One context's cells, driven by an :class:`~skillgraft.kv.context.AnswerContext`."""

    fingerprint: RuntimeFingerprint
    n_ctx: int

    def held_cells(self, prompt: Sequence[int]) -> tuple[Optional[Sequence[int]], Optional[Sequence[int]]]:
        """``(surely, at_most)``: the tokens of the cells held for certain (None: unknown), and
        for a backend that cannot keep fewer cells than it holds (a llama-server slot keeps the
        longest common prefix) those it may hold at most (None: it can keep any number)."""
        ...

    def check(self, state: KVState, block_id: str) -> None:
        """Raise unless ``state`` may be loaded here (its digest is checked when it is read)."""
        ...

    def evaluate(self, prompt: list[int], reuse: Reuse, block_id: str) -> None:
        """Make the cells hold ``prompt`` but its last token's logits: keep ``reuse.cells`` of
        them (loading ``reuse.state`` first when given; nothing when ``reuse.source`` is empty)
        and evaluate the rest, now or with :meth:`generate`."""
        ...

    def generate(self, options: SamplingOptions, prompt: list[int], deadline: Optional[Deadline],
                 reused: Callable[[int], None]) -> Iterator[TokenStep]:
        """Sample after the prompt; a backend that learns how many cells were really reused
        only as it answers reports them to ``reused``."""
        ...

    def save_prefixes(self, prefixes: Sequence[tuple[int, ...]]) -> list[Optional[Payload]]:
        """The payload of each prefix's cells — bytes, or a call that makes them from what was
        saved, left to whoever keeps the state — None for one the cells no longer hold (the
        cells are unchanged)."""
        ...

    def kept(self, state: KVState) -> None:
        """``state``, saved from these cells, is kept: a backend may stage it for a later load
        (off the answer's path)."""
        ...


class EngineCells:
    """What a backend over an engine shares (base of the in-process and the slot backends): the
    engine's runtime and context size, and its check of a payload before it is loaded."""

    def __init__(self, engine) -> None:
        self.engine = engine

    @property
    def fingerprint(self) -> RuntimeFingerprint:
        return self.engine.fingerprint

    @property
    def n_ctx(self) -> int:
        return self.engine.n_ctx

    def check(self, state: KVState, block_id: str) -> None:
        self.engine.check_payload(state, block_id, verify_hash=False)

    def kept(self, state: KVState) -> None:
        """Nothing to stage: the engine loads a state from its payload."""
