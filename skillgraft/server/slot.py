"""SlotBackend: one llama-server slot as the cells of an :class:`~skillgraft.kv.context.AnswerContext`.

The context decides what a prompt reuses; the slot carries it out. What the slot held from its
last answer is sent with ``cache_prompt`` (the server keeps the longest common prefix); a
derived prefix state or the block is restored into the slot first. One streamed
``/completion`` then evaluates the rest, and its first chunk must show that the server reused
exactly those cells (``timings.cache_n``; for what the slot held, between the prompt it surely
holds and the tokens it generated after it) and evaluated the rest, else
:class:`~skillgraft.errors.SlotReuseError`: never a silent re-prefill passed off as reuse.
Before the slot keeps fewer cells than it holds, its context is told
(:meth:`~skillgraft.server.slot_states.SlotStates.cells_going`), so the derived states pending on
them are saved first. Token pieces are decoded here from the token ids, with the model's own
vocabulary, as the in-process sampler does.
"""

from __future__ import annotations

import codecs
from functools import partial
from typing import Callable, Iterator, Optional, Protocol, Sequence

from ..core.deadline import Deadline
from ..core.sampling import SamplingOptions
from ..core.states import KVState, TokenStep
from ..engine.state_cut import cut_sequence_state
from ..kv.backend import EngineCells
from ..kv.prefixes import MIN_TAIL, Reuse
from ..protocols import ChatText
from .records import StreamChunk, check_reuse, reusable_cells
from .slot_files import SlotFile

__all__ = ["SlotBackend"]


class SlotServer(Protocol):
    """What a slot needs of its server (a :class:`~skillgraft.server.engine.LlamaServerEngine`)."""

    text: ChatText
    fingerprint: object
    n_ctx: int

    def restore(self, state: KVState, block_id: str = "", *, slot: int = 0, verify_hash: bool = True) -> object: ...

    def check_payload(self, state: KVState, block_id: str = "", *, verify_hash: bool = True) -> None: ...

    def held_tokens(self, slot: int, *, maybe: bool = False) -> Optional[list[int]]: ...

    def note_held(self, slot: int, tokens: Sequence[int], surely: Optional[int] = None, *, open_end: bool = False) -> None: ...

    def cells_going(self, slot: int, keeps: Optional[int] = 0) -> None: ...

    def save_slot_file(self, slot: int = 0) -> SlotFile: ...

    def stage_slot_file(self, state: KVState) -> None: ...

    def completion_request(
        self, tokens: Sequence[int], options: SamplingOptions, *, slot: Optional[int], n_probs: int = 0,
        cache_prompt: bool = True, stop: Sequence[str] = (), stream: bool = False,
    ) -> dict: ...

    def stream_request(self, request: dict, expected, deadline: Optional[Deadline] = None) -> Iterator[StreamChunk]: ...

    def complete(self, tokens: Sequence[int], *, slot: Optional[int]) -> object: ...


class SlotBackend(EngineCells):
    """Slot ``slot`` of ``engine`` as a :class:`~skillgraft.kv.backend.KVBackend`."""

    def __init__(self, engine: SlotServer, slot: int) -> None:
        super().__init__(engine)
        self.slot = slot
        self._cache_prompt = False
        self._expected = None

    def held_cells(self, prompt: Sequence[int]) -> tuple[Optional[Sequence[int]], Sequence[int]]:
        surely, maybe = self.engine.held_tokens(self.slot), self.engine.held_tokens(self.slot, maybe=True)
        return surely, maybe if maybe is not None else prompt  # unknown: it may hold all of it

    def evaluate(self, prompt: list[int], reuse: Reuse, block_id: str) -> None:
        """Restore what ``reuse`` asks; the prompt is evaluated by :meth:`generate`'s request,
        with ``cache_prompt`` and the reuse the server must report ``(block id, slot, (lo, hi)
        cells, prompt tokens)``."""
        engine, slot = self.engine, self.slot
        if reuse.state is not None:  # (the restore tells the context first)
            engine.restore(reuse.state, block_id if reuse.source == "block" else "", slot=slot, verify_hash=False)
        surely, maybe = engine.held_tokens(slot), engine.held_tokens(slot, maybe=True)
        lo, hi = self._bounds(surely, maybe, prompt) if surely is not None else (0, 0)
        if reuse.source == "slot" and surely is not None and hi > len(prompt) - MIN_TAIL:
            lo = hi = self._cut(prompt, reuse.cells)
        if surely is None or (not reuse.source and hi > len(prompt) - MIN_TAIL):
            engine.cells_going(slot, 0)  # evaluated afresh: the slot keeps nothing
            self._cache_prompt, self._expected = False, None
            return
        engine.cells_going(slot, lo)  # what it holds beyond the reused cells goes
        self._cache_prompt, self._expected = True, (block_id or "a prompt", slot, (lo, hi), len(prompt))

    def _cut(self, prompt: list[int], cells: int) -> int:
        """Make the slot keep only the first ``cells`` tokens of ``prompt``, which it holds and
        more (llama-server keeps the longest common prefix and is never told to keep less): one
        completion of those tokens and one other, which it keeps them for and evaluates alone,
        at its own position; the prompt then reuses exactly ``cells`` and evaluates the rest,
        :data:`MIN_TAIL` tokens at least. Returns ``cells``; :class:`SlotReuseError` if the
        server kept otherwise."""
        cut = [*prompt[:cells], 1 if prompt[cells] == 0 else 0]
        completion = self.engine.complete(cut, slot=self.slot)
        check_reuse("a prompt sent again", self.slot, completion.cache_n, completion.prompt_n, cells, len(cut))
        self.engine.note_held(self.slot, [*cut, *completion.tokens], surely=len(cut))
        return cells

    @staticmethod
    def _bounds(surely: list[int], maybe: Optional[list[int]], prompt: list[int]) -> tuple[int, int]:
        """The cells the server may reuse for ``prompt``: at least those it surely holds, at
        most those it may hold (any, when the slot's last answer was cut short unseen)."""
        hi = len(prompt) - 1 if maybe is None else reusable_cells(maybe, prompt)
        return reusable_cells(surely, prompt), hi

    def generate(self, options: SamplingOptions, prompt: list[int], deadline: Optional[Deadline],
                 reused: Callable[[int], None]) -> Iterator[TokenStep]:
        request = self.engine.completion_request(
            prompt, options, slot=self.slot, n_probs=1, cache_prompt=self._cache_prompt, stream=True,
        )
        chunks = self.engine.stream_request(request, self._expected, deadline)
        text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        vocabulary = self.engine.text
        generated: list[int] = []
        finished = False
        try:
            for chunk in chunks:
                if chunk.cache_n is not None:
                    reused(chunk.cache_n)
                for step in chunk.steps:
                    generated.append(step.token)
                    if vocabulary.is_end_of_generation(step.token):
                        finished = True
                        return
                    yield TokenStep(step.token, text.decode(vocabulary.piece(step.token)), step.logprob, float("nan"))
            finished = True
        finally:
            chunks.close()  # an answer cut short gives its slot back at once
            # The server keeps the prompt and the tokens it generated (perhaps not the last);
            # of an answer cut short it may have generated more than was seen.
            self.engine.note_held(self.slot, [*prompt, *generated], surely=len(prompt), open_end=not finished)

    def kept(self, state: KVState) -> None:
        """Stage ``state``'s slot file now, so that restoring it writes nothing on an answer's path."""
        self.engine.stage_slot_file(state)

    def save_prefixes(self, prefixes: Sequence[tuple[int, ...]]) -> list[Optional[Callable[[], bytes]]]:
        """One save of the slot; for each prefix it holds, the cut that makes its payload (a copy
        of tens of MB, left to whoever keeps the state: off the answer's path)."""
        saved = self.engine.save_slot_file(self.slot)
        return [partial(cut_sequence_state, saved.state, len(prefix)) if saved.tokens[: len(prefix)] == prefix
                else None for prefix in prefixes]
