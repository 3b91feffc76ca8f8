"""The pool seen as one engine by a :class:`~skillgraft.memory.SkillMemory`.

The memory needs an engine for the runtime fingerprint (to route only to blocks this
runtime can graft), the chat template and tokenizer (the model's own vocabulary, loaded in
this process: the same rendering as the in-process engine), ``capture`` (a deposit leases
a slot like any request) and contexts to answer in (:meth:`PooledEngine.answer_slot`: a
leased slot). The gateway leases slots itself when it retries an answer on another server.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence, Union

from ..engine.state_cut import cut_state
from ..core.chat_layout import split_chat
from ..core.fingerprint import RuntimeFingerprint
from ..core.states import KVState
from ..protocols import AnswerSlot
from .pool import ServerPool


class PooledEngine:
    """A :class:`~skillgraft.protocols.CaptureEngine` over a :class:`ServerPool`."""

    def __init__(self, pool: ServerPool) -> None:
        self.pool = pool
        first = pool.engines[0]
        self.model_name = first.model_name
        self.n_ctx = first.n_ctx
        self.text = first.text

    @property
    def fingerprint(self) -> RuntimeFingerprint:
        return self.pool.fingerprint

    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = True) -> list[int]:
        return self.text.tokenize(text, add_bos=add_bos, special=special)

    def chat_prompt(self, messages: Sequence[tuple[str, str]], *, add_generation_prompt: bool = True) -> str:
        return self.text.chat_prompt(messages, add_generation_prompt=add_generation_prompt)

    def chat_split(self, system: str, user: str = "") -> tuple[str, str]:
        return split_chat(self, system, user)

    def cut_state(self, state: KVState, keep: int) -> KVState:
        """``state`` cut to its first ``keep`` cells, as the pool's servers lay states out
        (llama-server's are llama.cpp's; a stand-in pool's engine may cut its own)."""
        own = getattr(self.pool.engines[0], "cut_state", None)
        return own(state, keep) if own is not None else cut_state(state, keep)

    def check_grammar(self, gbnf: str) -> None:
        self.text.check_grammar(gbnf)

    def piece(self, token: int) -> bytes:
        return self.text.piece(token)

    def is_end_of_generation(self, token: int) -> bool:
        return self.text.is_end_of_generation(token)

    def capture(self, source: Union[str, Sequence[int]], progress=None) -> KVState:
        with self.pool.lease() as lease:
            state = lease.capture(source)
        if progress is not None:
            progress(state.n_tokens, state.n_tokens)
        return state

    @contextmanager
    def answer_slot(self, prefixes=None) -> Iterator[AnswerSlot]:
        """A leased slot, held for one answer in the reuse scope of ``prefixes`` (see
        :class:`~skillgraft.kv.context.AnswerContext`)."""
        with self.pool.lease(scope=prefixes.scope if prefixes is not None else "") as lease:
            yield lease.answer_slot(prefixes)

    def settle_derived(self) -> int:
        """Keep the derived states pending on every slot of the pool."""
        return self.pool.settle_captures()

    def close(self) -> None:
        """The pool is closed by its owner."""
