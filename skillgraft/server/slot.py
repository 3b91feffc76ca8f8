"""ServerSlot: one llama-server slot held for one answer.

Restoring only records the block's state; generating makes the prompt — the block's kept
cells and the tokens prefilled after them, or those tokens alone — and reuses the longest
beginning of it already at hand (:func:`~skillgraft.core.prefix_reuse.choose_reuse`): what
the slot holds from its last answer (sent with ``cache_prompt``: the server keeps the longest
common prefix), a derived prefix state or the block (restored into the slot first). One
streamed ``/completion`` then evaluates the rest, and its first chunk must show that the
server reused exactly those cells (``timings.cache_n``; for what the slot held, between the
prompt it surely holds and the tokens it generated after it) and evaluated the rest, else
:class:`~skillgraft.errors.SlotReuseError`: never a silent re-prefill passed off as reuse.
With a :class:`~skillgraft.core.prefix_reuse.PrefixCache`, a prefix two prompts shared is
kept as a derived state, never evaluated again: once the answer is made it is noted as pending
for the slot, which still holds its cells, and saved (the slot saved, the prefix's cells cut
from it) when the slot is about to lose them, idles or closes
(:mod:`~skillgraft.core.deferred_capture`), not while an answer waits. Token pieces are
decoded here from the token ids, with the model's own vocabulary, as the in-process sampler does.
"""

from __future__ import annotations

import codecs
from typing import Iterator, Optional, Protocol, Sequence

from ..core.deadline import Deadline
from ..core.deferred_capture import PendingCapture
from ..core.prefix_reuse import MIN_TAIL, PrefixCache, Reuse, choose_reuse
from ..core.sampling import SamplingOptions
from ..core.states import KVState, TokenStep
from ..errors import InputError
from ..protocols import ChatText
from .records import StreamChunk, reusable_cells

ONE = SamplingOptions(1)


class SlotServer(Protocol):
    """What a slot needs of its server (a :class:`~skillgraft.server.engine.LlamaServerEngine`)."""

    text: ChatText
    fingerprint: object

    def restore(self, state: KVState, block_id: str = "", *, slot: int = 0, verify_hash: bool = True) -> object: ...

    def require_fits(self, n_tokens: int, what: str = "text") -> None: ...

    def held_tokens(self, slot: int, *, maybe: bool = False) -> Optional[list[int]]: ...

    def note_held(self, slot: int, tokens: Sequence[int], surely: Optional[int] = None, *, open_end: bool = False) -> None: ...

    def defer_capture(self, slot: int, capture: PendingCapture) -> None: ...

    def settle_captures(self, slot: int, keeps: Optional[int] = None) -> int: ...

    def completion_request(
        self, tokens: Sequence[int], options: SamplingOptions, *, slot: Optional[int], n_probs: int = 0,
        cache_prompt: bool = True, stop: Sequence[str] = (), stream: bool = False,
    ) -> dict: ...

    def stream_request(self, request: dict, expected, deadline: Optional[Deadline] = None) -> Iterator[StreamChunk]: ...


class ServerSlot:
    """An :class:`~skillgraft.protocols.AnswerSlot` over slot ``slot`` of ``engine``."""

    def __init__(self, engine: SlotServer, slot: int, prefixes: Optional[PrefixCache] = None,
                 deadline: Optional[Deadline] = None) -> None:
        self.engine = engine
        self.slot = slot
        self.prefixes = prefixes
        self.deadline = deadline
        self.reused_cells = 0
        self.reused_from = ""
        self._restored: Optional[tuple[KVState, str, int]] = None
        self._prompt: list[int] = []
        self._source = ""
        self._capture: tuple[list[int], str] = ([], "")

    def restore(self, state: KVState, block_id: str, *, keep: int) -> None:
        if not 0 < keep <= state.n_tokens:
            raise InputError(f"keep must be within 1..{state.n_tokens}, got {keep}")
        self._restored = (state, block_id, keep)

    def prefill(self, tokens: Sequence[int]) -> None:
        if not tokens:
            raise InputError("nothing to prefill")
        self._prompt = [int(t) for t in tokens]

    def generate(self, options: SamplingOptions) -> Iterator[TokenStep]:
        restored, self._restored = self._restored, None
        tokens, self._prompt = self._prompt, []
        if not tokens:
            raise InputError("nothing was prefilled")
        block_id = restored[1] if restored else ""
        prompt = [*restored[0].tokens[: restored[2]], *tokens] if restored else tokens
        after = restored[2] if restored else 0  # the block's cells in front of the app's prompt
        self.engine.require_fits(len(prompt) + 1, "the prompt plus one answer token")
        prefixes = self.prefixes
        surely, maybe = self.engine.held_tokens(self.slot), self.engine.held_tokens(self.slot, maybe=True)
        reuse = choose_reuse(
            prompt, held=surely, held_at_most=maybe if maybe is not None else prompt,
            block=(restored[0], restored[2]) if restored else None,
            derived=prefixes.lookup(prompt) if prefixes else None,
            capture_at=prefixes.capture_point(prompt, after) if prefixes else 0,
        )
        cache_prompt, expected = self._prepare(reuse, prompt, block_id)
        if prefixes is not None:
            prefixes.remember(prompt, after)
        request = self.engine.completion_request(
            prompt, options, slot=self.slot, n_probs=1, cache_prompt=cache_prompt, stream=True,
        )
        self._source = reuse.source or "slot"
        self._capture = (prompt[: reuse.capture_at], block_id)
        return self._steps(self.engine.stream_request(request, expected, self.deadline), prompt)

    def _prepare(self, reuse: Reuse, prompt: list[int], block_id: str):
        """Restore what ``reuse`` asks; return ``cache_prompt`` and the reuse the server must
        report ``(block id, slot, (lo, hi) cells, prompt tokens)``."""
        engine, slot = self.engine, self.slot
        if reuse.state is not None:  # (the captures pending on the slot are saved first)
            engine.restore(reuse.state, block_id if reuse.source == "block" else "", slot=slot, verify_hash=False)
        surely, maybe = engine.held_tokens(slot), engine.held_tokens(slot, maybe=True)
        lo, hi = self._bounds(surely, maybe, prompt) if surely is not None else (0, 0)
        if surely is None or (not reuse.source and hi > len(prompt) - MIN_TAIL):
            engine.settle_captures(slot, keeps=0)  # evaluated afresh: the slot keeps nothing
            return False, None
        engine.settle_captures(slot, keeps=lo)  # what it holds beyond the reused cells goes
        return True, (block_id or "a prompt", slot, (lo, hi), len(prompt))

    @staticmethod
    def _bounds(surely: list[int], maybe: Optional[list[int]], prompt: list[int]) -> tuple[int, int]:
        """The cells the server may reuse for ``prompt``: at least those it surely holds, at
        most those it may hold (any, when the slot's last answer was cut short unseen)."""
        hi = len(prompt) - 1 if maybe is None else reusable_cells(maybe, prompt)
        return reusable_cells(surely, prompt), hi

    def _keep_derived(self) -> None:
        """Note the prefix the prompt shared with an earlier one as pending for the slot."""
        prefix, block_id = self._capture
        self._capture = ([], "")
        if prefix and self.prefixes is not None:
            self.engine.defer_capture(self.slot, PendingCapture(tuple(prefix), block_id, self.prefixes))

    def _steps(self, chunks, prompt: list[int]) -> Iterator[TokenStep]:
        text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        vocabulary = self.engine.text
        generated: list[int] = []
        finished = False
        try:
            for chunk in chunks:
                if chunk.cache_n is not None:
                    self.reused_cells = chunk.cache_n
                    self.reused_from = self._source if chunk.cache_n else ""
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
            if finished:
                self._keep_derived()
