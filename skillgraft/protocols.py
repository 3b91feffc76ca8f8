"""The seams: what the memory needs from an engine, from a context it answers in, and from
an embedder.

- :class:`ChatText` renders and tokenizes; :class:`CaptureEngine` adds the runtime
  fingerprint and ``capture`` (what a deposit needs) and ``answer_slot()``, a context held
  for one answer: :class:`AnswerSlot`. The one answer pipeline
  (:mod:`skillgraft.core.pipeline`) drives every door through these three.
- :class:`GraftEngine` is the whole in-process context (restore, graft, prefill, sample,
  logits) that exactness tests and benchmarks drive directly.
- :class:`TextEmbedder` is what the :class:`~skillgraft.routing.router.Router` calls on an
  embedder.
- :class:`Catalog` and :class:`BlockStorage` are what a
  :class:`~skillgraft.store.block_store.BlockStore` calls on its catalog and its block
  payload storage (defined in :mod:`skillgraft.store.protocols`).

The in-process :class:`~skillgraft.engine.llama.Engine`, a
:class:`~skillgraft.server.engine.LlamaServerEngine` (one leased slot at a time), the
catalogs and block storages of :mod:`skillgraft.store` and the fakes of
:mod:`skillgraft.testing` implement them. Importing this module loads neither llama.cpp,
torch nor a database driver.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ContextManager, Iterator, Optional, Protocol, Sequence, Union, runtime_checkable

import numpy as np

from .core.fingerprint import RuntimeFingerprint
from .core.states import KVState, TokenStep
from .core.progress import Progress
from .store.protocols import BlockStorage, Catalog

__all__ = ["AnswerSlot", "BlockStorage", "CaptureEngine", "Catalog", "ChatText", "GraftEngine", "TextEmbedder"]

Messages = Sequence[tuple[str, str]]

if TYPE_CHECKING:
    from .kv.prefixes import PrefixCache
    from .core.sampling import SamplingOptions


@runtime_checkable
class ChatText(Protocol):
    """A model's tokenizer and chat template."""

    model_name: str

    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = True) -> list[int]:
        """Token ids of ``text``; ``special`` parses control tokens of the chat template."""
        ...

    def chat_prompt(self, messages: Messages, *, add_generation_prompt: bool = True) -> str:
        """Render ``[(role, content), ...]`` with the model's chat template."""
        ...

    def piece(self, token: int) -> bytes:
        """The bytes of one generated token (control tokens empty)."""
        ...

    def is_end_of_generation(self, token: int) -> bool:
        ...


@runtime_checkable
class AnswerSlot(Protocol):
    """A context held for one answer: restore a verified state (its first ``keep`` cells),
    prefill tokens after it (or from position 0 when nothing was restored), then generate.

    ``generate`` yields :class:`TokenStep` s (end of generation not included) and may run
    lazily; ``reused_cells`` is how many prompt cells the context reused (the block's, a
    derived prefix state's or what it held from its last answer: ``reused_from`` says which),
    known once the first step arrived.
    """

    reused_cells: int
    reused_from: str

    def restore(self, state: KVState, block_id: str, *, keep: int) -> None:
        ...

    def prefill(self, tokens: Sequence[int], *, mark: int = 0, block_id: str = "") -> None:
        ...

    def generate(self, options: "SamplingOptions") -> Iterator[TokenStep]:
        ...


@runtime_checkable
class CaptureEngine(ChatText, Protocol):
    """What a memory needs from an engine: render, capture blocks, and hold contexts."""

    n_ctx: int
    fingerprint: RuntimeFingerprint

    def capture(self, source: Union[str, Sequence[int]], progress: Progress = None) -> KVState:
        """Prefill ``source`` (text or token ids) and capture the state of the sequence."""
        ...

    def answer_slot(self, prefixes: Optional["PrefixCache"] = None) -> ContextManager[AnswerSlot]:
        """A context for one answer, held until the ``with`` block ends; with ``prefixes`` it
        restores and captures derived prefix states (:mod:`skillgraft.kv.prefixes`)."""
        ...

    def settle_derived(self) -> int:
        """Keep now the derived prefix states still pending on the engine's contexts (the cells
        stay); how many were kept."""
        ...

    def check_grammar(self, gbnf: str) -> None:
        """Raise :class:`~skillgraft.errors.FormatError` unless a GBNF grammar (an answer's
        :class:`~skillgraft.core.tools.OutputFormat`) can constrain this model's tokens."""
        ...

    def close(self) -> None:
        ...


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
      ``n_ctx``, and is reproducible for a given ``options.seed``;
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

    def generate(self, options: "SamplingOptions") -> Iterator[TokenStep]:
        """Sample up to ``options.max_tokens`` after what the context holds (``options.grammar``:
        GBNF text it must fit)."""
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
