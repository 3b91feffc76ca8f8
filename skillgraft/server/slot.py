"""ServerSlot: one llama-server slot held for one answer.

Restoring writes the verified state's slot file and restores it into the slot at once;
prefilling only records the tokens; generating sends one streamed ``/completion`` whose
prompt is the block's kept cells plus those tokens, and checks on the first chunk that the
server reused exactly the kept cells (``timings.cache_n``) and evaluated exactly the new
ones, else :class:`~skillgraft.errors.SlotReuseError`. With nothing restored the prompt is
evaluated afresh. Token pieces are decoded here from the token ids, with the model's own
vocabulary, exactly as the in-process sampler decodes them.
"""

from __future__ import annotations

import codecs
from typing import Iterator, Optional, Protocol, Sequence

from ..core.sampling import SamplingOptions
from ..core.states import KVState, TokenStep
from ..errors import InputError
from ..protocols import ChatText
from .records import StreamChunk, reusable_cells


class SlotServer(Protocol):
    """What a slot needs of its server (a :class:`~skillgraft.server.engine.LlamaServerEngine`)."""

    text: ChatText

    def restore(self, state: KVState, block_id: str = "", *, slot: int = 0, verify_hash: bool = True) -> object: ...

    def require_fits(self, n_tokens: int, what: str = "text") -> None: ...

    def completion_request(
        self, tokens: Sequence[int], options: SamplingOptions, *, slot: Optional[int], n_probs: int = 0,
        cache_prompt: bool = True, stop: Sequence[str] = (), stream: bool = False,
    ) -> dict: ...

    def stream_request(self, request: dict, expected: Optional[tuple[str, int, int, int]]) -> Iterator[StreamChunk]: ...


class ServerSlot:
    """An :class:`~skillgraft.protocols.AnswerSlot` over slot ``slot`` of ``engine``."""

    def __init__(self, engine: SlotServer, slot: int) -> None:
        self.engine = engine
        self.slot = slot
        self.reused_cells = 0
        self._restored: Optional[tuple[KVState, str, int]] = None
        self._prompt: list[int] = []

    def restore(self, state: KVState, block_id: str, *, keep: int) -> None:
        if not 0 < keep <= state.n_tokens:
            raise InputError(f"keep must be within 1..{state.n_tokens}, got {keep}")
        self.engine.restore(state, block_id, slot=self.slot, verify_hash=False)
        self._restored = (state, block_id, keep)

    def prefill(self, tokens: Sequence[int]) -> None:
        if not tokens:
            raise InputError("nothing to prefill")
        self._prompt = [int(t) for t in tokens]

    def generate(self, options: SamplingOptions) -> Iterator[TokenStep]:
        restored, self._restored = self._restored, None
        prompt, self._prompt = self._prompt, []
        if not prompt:
            raise InputError("nothing was prefilled")
        expected = None
        if restored is not None:
            state, block_id, keep = restored
            prompt = list(state.tokens[:keep]) + prompt
            expected = (block_id, self.slot, reusable_cells(state.tokens, prompt), len(prompt))
        self.engine.require_fits(len(prompt) + 1, "the prompt plus one answer token")
        request = self.engine.completion_request(
            prompt, options, slot=self.slot, n_probs=1, cache_prompt=restored is not None, stream=True,
        )
        return self._steps(self.engine.stream_request(request, expected), expected)

    def _steps(self, chunks, expected) -> Iterator[TokenStep]:
        text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        vocabulary = self.engine.text
        try:
            for chunk in chunks:
                if expected is not None:
                    self.reused_cells = expected[2]
                for step in chunk.steps:
                    if vocabulary.is_end_of_generation(step.token):
                        return
                    yield TokenStep(step.token, text.decode(vocabulary.piece(step.token)), step.logprob, float("nan"))
        finally:
            chunks.close()  # an answer cut short gives its slot back at once
