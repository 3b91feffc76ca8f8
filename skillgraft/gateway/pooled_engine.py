"""The pool seen as one engine by a :class:`~skillgraft.memory.SkillMemory`.

The memory needs an engine for three things in the gateway: the runtime fingerprint (to
route only to blocks this runtime can graft), the chat template and tokenizer (to lay out
a block's tokens), and ``capture`` (to deposit a manual or a verified solution). Each goes to
a server of the pool; a capture leases a slot like any request. Generation itself is the
gateway's business (:mod:`skillgraft.gateway.service`), so the in-process generation calls
of :class:`~skillgraft.protocols.GraftEngine` are refused here.
"""

from __future__ import annotations

from typing import Sequence, Union

from ..errors import EngineError
from ..core.fingerprint import RuntimeFingerprint
from ..core.states import KVState
from .pool import ServerPool


class PooledEngine:
    """Fingerprint, template, tokenizer and capture of a :class:`ServerPool`."""

    def __init__(self, pool: ServerPool) -> None:
        self.pool = pool
        first = pool.engines[0]
        self.model_name = first.model_name
        self.n_ctx = first.settings.n_ctx

    @property
    def fingerprint(self) -> RuntimeFingerprint:
        return self.pool.fingerprint

    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = True) -> list[int]:
        return self.pool.any_engine().tokenize(text, add_bos=add_bos, special=special)

    def chat_prompt(self, messages: Sequence[tuple[str, str]], *, add_generation_prompt: bool = True) -> str:
        return self.pool.any_engine().chat_prompt(messages, add_generation_prompt=add_generation_prompt)

    def chat_split(self, system: str, user: str = "") -> tuple[str, str]:
        return self.pool.any_engine().chat_split(system, user)

    def capture(self, source: Union[str, Sequence[int]], progress=None) -> KVState:
        with self.pool.lease() as lease:
            state = lease.engine.capture(source, slot=lease.slot)
        if progress is not None:
            progress(state.n_tokens, state.n_tokens)
        return state

    def _not_here(self, *args, **kwargs):
        raise EngineError("the gateway's pool generates through its servers, not as an in-process engine")

    graft = prefill = generate = logits = _not_here

    def close(self) -> None:
        """The pool is closed by its owner."""
