"""The seams: what the memory needs from an engine and from an embedder.

:class:`GraftEngine` lists exactly what :class:`~skillgraft.memory.SkillMemory` (and the
code built on it: the flywheel, bundles) calls on an engine; :class:`TextEmbedder` what the
:class:`~skillgraft.routing.router.Router` calls on an embedder. The in-process llama.cpp
:class:`~skillgraft.engine.llama.Engine` and the MiniLM
:class:`~skillgraft.routing.embedder.Embedder` are one implementation each;
:mod:`skillgraft.testing` holds deterministic fakes. Importing this module loads neither
llama.cpp nor torch.
"""

from __future__ import annotations

from .core.progress import Progress

from typing import Iterator, Optional, Protocol, Sequence, Union, runtime_checkable

import numpy as np

from .core.fingerprint import RuntimeFingerprint
from .core.states import KVState, TokenStep

Messages = Sequence[tuple[str, str]]


@runtime_checkable
class GraftEngine(Protocol):
    """One context with one sequence that can capture a KV state and graft it back.

    Contracts every implementation keeps:

    - ``capture`` of the same tokens under the same runtime gives the same payload bytes;
    - ``graft`` checks the state's fingerprint (:class:`FingerprintMismatchError`), size and
      SHA-256 (:class:`BlockIntegrityError`) *before* restoring it, restores it at its own
      positions ``[0, keep)`` and evaluates the query after it; the logits then equal those
      of a fresh ``prefill`` of the same tokens;
    - ``generate`` continues after what the context holds, stops at end of generation or at
      ``n_ctx``, and is reproducible for a given ``seed``;
    - ``chat_split(system)[0]`` is the rendered chat up to where the user's text begins: what
      a block captures.
    """

    model_name: str
    n_ctx: int
    fingerprint: RuntimeFingerprint

    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = True) -> list[int]:
        """Token ids of ``text``; ``special`` parses control tokens of the chat template."""
        ...

    def chat_prompt(self, messages: Messages, *, add_generation_prompt: bool = True) -> str:
        """Render ``[(role, content), ...]`` with the model's chat template."""
        ...

    def chat_split(self, system: str, user: str = "") -> tuple[str, str]:
        """``(prefix, turn)``: the chat up to the user's text, and ``user`` plus the rest."""
        ...

    def capture(self, source: Union[str, Sequence[int]], progress: Progress = None) -> KVState:
        """Prefill ``source`` (text or token ids) and capture the state of the sequence."""
        ...

    def graft(
        self,
        state: KVState,
        query: Union[str, Sequence[int]],
        block_id: str = "",
        *,
        keep: Optional[int] = None,
        verify_hash: bool = True,
    ) -> np.ndarray:
        """Restore ``state`` (its first ``keep`` cells) and evaluate ``query`` after it; the last logits."""
        ...

    def prefill(self, tokens: Sequence[int], progress: Progress = None, *, start: int = 0) -> None:
        """Forget the context and evaluate ``tokens`` at ``[start, start+len)``."""
        ...

    def generate(
        self,
        max_tokens: int,
        *,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int = 0,
        repeat_penalty: float = 1.0,
        penalty_last_n: int = 64,
    ) -> Iterator[TokenStep]:
        """Sample up to ``max_tokens`` after what the context holds."""
        ...

    def logits(self) -> np.ndarray:
        """The logits of the last evaluated token."""
        ...

    def close(self) -> None:
        """Release the engine; it is unusable afterwards."""
        ...


@runtime_checkable
class TextEmbedder(Protocol):
    """Turns texts into unit-length vectors; ``name`` is recorded with every stored vector."""

    name: str

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """One unit-length float32 row per text."""
        ...
