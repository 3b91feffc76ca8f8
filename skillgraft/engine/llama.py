"""The in-process graft engine: one pinned llama.cpp context, loaded and driven.

One deterministic llama.cpp context with a single sequence (seq 0). It can prefill tokens,
capture the sequence's KV state (the per-sequence API: no logits arrays), restore a captured
state at its own positions ``[0, N)``, evaluate a query at ``[N, N+q)`` and generate from
there. Payloads are checked for size, SHA-256 and runtime fingerprint *before* their bytes
reach llama.cpp, which checks almost nothing.

This module loads the model and the context and decodes; the tokenizer and chat template
are :mod:`skillgraft.engine.text`, the state I/O :mod:`skillgraft.engine.state_io`, the sampler
:mod:`skillgraft.core.sampling`. An :class:`Engine` is not thread-safe: use one per thread or
guard it with a lock.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator, Optional, Sequence, Union

import llama_cpp
import numpy as np

from . import state_io as engine_state
from ..kv.context import LocalContext
from ..core.progress import Progress
from ..core.chat_layout import split_chat
from ..config import EngineSettings, default_model
from .native import build_info, context_params, init_backend, kv_bytes_per_token
from .state_cut import cut_payload, cut_state
from .state_io import SEQ
from .text import LlamaText
from ..errors import ConfigError, EngineError, RestoreRejectedError
from ..core.fingerprint import RuntimeFingerprint, backend_of, file_sha256
from .models import resolve_model, settings_for
from ..core.sampling import SamplingOptions, sample
from ..core.states import (
    KVState, TokenStep, append_tokens, capture_tokens, check_state, graft_tokens, prefill_tokens, require_fits, sha256_hex,
)


class Engine(LocalContext):
    """A pinned llama.cpp context over one GGUF model.

    ``model`` is an embedded model name (``smollm2-135m``, ``gemma3-270m``, ``qwen2.5-coder-0.5b``)
    or a GGUF path.
    Sliding-window models get ``swa_full=True`` unless ``allow_inexact_swa`` is set, which
    exists only for negative controls.
    """

    def __init__(
        self,
        model: Union[str, Path, None] = None,
        settings: Optional[EngineSettings] = None,
        *,
        allow_inexact_swa: bool = False,
    ) -> None:
        self.model_name, self.model_path = resolve_model(model or default_model())
        self.settings = settings_for(self.model_path, settings)
        init_backend()
        self._model = self._ctx = self._batch = None
        model_params = llama_cpp.llama_model_default_params()
        model_params.n_gpu_layers = self.settings.n_gpu_layers
        # No extra buffer types (AMX, repacked weights): the AMX kernels crash on hosts that do
        # not grant AMX tile state, and llama-server runs with --no-repack to match.
        model_params.use_extra_bufts = False
        self._model = llama_cpp.llama_model_load_from_file(str(self.model_path).encode(), model_params)
        if not self._model:
            raise EngineError(f"llama.cpp could not load the model file {self.model_path}")
        self.text = LlamaText(self._model, self.model_name)
        self.n_vocab = self.text.n_vocab
        self.sliding_window = int(llama_cpp.llama_model_n_swa(self._model))
        swa_full = self.settings.swa_full
        if swa_full is None:
            swa_full = self.sliding_window > 0
        elif not swa_full and self.sliding_window > 0 and not allow_inexact_swa:
            self.close()
            raise ConfigError(
                f"{self.model_name} uses sliding-window attention (window {self.sliding_window}): "
                "grafts are exact only with swa_full=True"
            )
        self.swa_full = bool(swa_full)
        self._open_context()
        self.fingerprint = self._build_fingerprint()
        self._state_header, self._state_per_token = self._measure_state_layout()

    # -- setup -----------------------------------------------------------------------------

    def _open_context(self) -> None:
        s = self.settings
        params = context_params(s, self.swa_full)
        self._ctx = llama_cpp.llama_init_from_model(self._model, params)
        if not self._ctx:
            self.close()
            raise EngineError(
                f"llama.cpp could not create a context (n_ctx {s.n_ctx}, n_batch {s.n_batch}) for {self.model_name}"
            )
        self.n_ctx = int(llama_cpp.llama_n_ctx(self._ctx))
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(s.n_batch, 0, 1)
        self.reset(data=False)

    def _build_fingerprint(self) -> RuntimeFingerprint:
        s = self.settings
        info = build_info()
        return RuntimeFingerprint(
            gguf_sha256=file_sha256(self.model_path),
            llama_cpp_python=info["llama_cpp_python"],
            system_info=info["system_info"],
            n_batch=s.n_batch,
            n_ubatch=s.n_ubatch,
            type_k=s.type_k,
            type_v=s.type_v,
            flash_attn=s.flash_attn,
            swa_full=self.swa_full,
            n_gpu_layers=s.n_gpu_layers,
            backend=backend_of(s.n_gpu_layers, llama_cpp.llama_supports_gpu_offload()),
        )

    def _measure_state_layout(self) -> tuple[int, int]:
        """Header and per-token bytes of a seq-0 state, from states of 1 and 2 tokens."""
        probe = self.tokenize("a b", add_bos=False)[:1] or [0]
        sizes = []
        for n in (1, 2):
            self.reset()
            self._decode(probe * n, 0)
            sizes.append(engine_state.state_size(self._ctx))
        self.reset()
        per_token = sizes[1] - sizes[0]
        return sizes[0] - per_token, per_token

    def close(self) -> None:
        """Free the native context and model. The engine is unusable afterwards."""
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx:
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            llama_cpp.llama_model_free(self._model)
            self._model = None

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    # -- model facts -----------------------------------------------------------------------

    def metadata(self, key: str) -> Optional[str]:
        """A GGUF metadata value as text, or None."""
        return self.text.metadata(key)

    @property
    def kv_bytes_per_token(self) -> float:
        """KV bytes per token implied by the model's shape and the cache types."""
        return kv_bytes_per_token(self._model, self.text, self.settings)

    @property
    def state_bytes_per_token(self) -> int:
        """Measured bytes per token of a captured state (KV plus a few bytes of cell metadata)."""
        return self._state_per_token

    def state_size(self, n_tokens: int) -> Optional[int]:
        """The exact payload size of a state of ``n_tokens`` tokens, where it is predictable.

        Sliding-window layers keep only the cells inside their window, so for those models
        the size is not a function of the token count and this returns None (the catalog's
        recorded size and SHA-256 still guard every payload).
        """
        if self.sliding_window:
            return None
        return self._state_header + n_tokens * self._state_per_token

    # -- tokens (see skillgraft.engine.text) ----------------------------------------------

    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = True) -> list[int]:
        """Token ids of ``text``; ``special`` parses control tokens such as ``<|im_start|>``."""
        return self.text.tokenize(text, add_bos=add_bos, special=special)

    def piece(self, token: int) -> bytes:
        """The bytes of one token (control tokens rendered as empty)."""
        return self.text.piece(token)

    def detokenize(self, tokens: Sequence[int]) -> str:
        return self.text.detokenize(tokens)

    def is_end_of_generation(self, token: int) -> bool:
        return self.text.is_end_of_generation(token)

    def chat_prompt(self, messages: Sequence[tuple[str, str]], *, add_generation_prompt: bool = True) -> str:
        """Render ``[(role, content), ...]`` with the model's own chat template."""
        return self.text.chat_prompt(messages, add_generation_prompt=add_generation_prompt)

    def chat_split(self, system: str, user: str = "") -> tuple[str, str]:
        """``(prefix, turn)``: see :func:`skillgraft.core.chat_layout.split_chat`."""
        return split_chat(self, system, user)

    # -- decoding --------------------------------------------------------------------------

    def reset(self, *, data: bool = True) -> None:
        """Forget every cell of the context (``data=False``: without zeroing the KV buffer)."""
        self._cells_going(0)  # the derived states pending on these cells are kept first
        llama_cpp.llama_memory_clear(self._memory, data)
        self.n_past, self._has_logits = 0, False
        self.held: Optional[list[int]] = []  # the tokens of the cells held at their own positions (None: unknown)

    def _decode(self, tokens: Sequence[int], start: int, progress: Progress = None) -> None:
        """Decode ``tokens`` at positions ``start...`` in n_batch chunks; logits for the last one."""
        n_batch = self.settings.n_batch
        batch = self._batch
        for offset in range(0, len(tokens), n_batch):
            chunk = tokens[offset : offset + n_batch]
            batch.n_tokens = len(chunk)
            for i, token in enumerate(chunk):
                batch.token[i] = token
                batch.pos[i] = start + offset + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = SEQ
                batch.logits[i] = 0
            last = offset + len(chunk) == len(tokens)
            batch.logits[len(chunk) - 1] = 1 if last else 0
            rc = llama_cpp.llama_decode(self._ctx, batch)
            if rc != 0:
                self.reset()
                raise EngineError(f"llama_decode failed with code {rc} at position {start + offset}")
            if progress:
                progress(offset + len(chunk), len(tokens))
        self.held = self.held + list(tokens) if self.held is not None and len(self.held) == start else None
        self.n_past, self._has_logits = start + len(tokens), True

    def append(self, tokens: Sequence[int]) -> None:
        """Decode ``tokens`` after what the context holds (at ``[n_past, n_past+len)``)."""
        self._decode(append_tokens(self, tokens), self.n_past)

    def prefill(self, tokens: Sequence[int], progress: Progress = None, *, start: int = 0) -> None:
        """Reset and decode ``tokens`` at ``[start, start+len)``; ``progress(done, total)`` per chunk.

        ``start`` > 0 computes the tokens at shifted positions (a control for exactness
        measurements: such a state is not what a block at its own position holds).
        """
        tokens = prefill_tokens(self, tokens, start)
        self.reset()
        self._decode(tokens, start, progress)

    def keep_cells(self, n: int) -> None:
        """Keep the first ``n`` cells of seq 0, forget the rest (exact: no cell depends on a later one)."""
        self._cells_going(n)
        engine_state.drop_after(self._memory, n)
        self.n_past, self._has_logits = n, False
        self.held = None if self.held is None else self.held[:n]

    def logits(self) -> np.ndarray:
        """A float32 copy of the logits of the last decoded token."""
        if not self._has_logits:
            raise EngineError("no logits: decode at least one token first (a restored state holds none)")
        pointer = llama_cpp.llama_get_logits_ith(self._ctx, -1)
        return np.ctypeslib.as_array(pointer, shape=(self.n_vocab,)).copy()

    def logits_bytes(self) -> bytes:
        """The last logits as float32 bytes, for byte-exact comparisons."""
        return self.logits().astype(np.float32).tobytes()


    # -- capture and graft -----------------------------------------------------------------

    def capture(self, source: Union[str, Sequence[int]], progress: Progress = None) -> KVState:
        """Prefill ``source`` (text or token ids) and capture the KV state of seq 0."""
        tokens = capture_tokens(self, source)
        started = time.perf_counter()
        self.prefill(tokens, progress)
        payload = self.save_state()
        elapsed = time.perf_counter() - started
        return KVState(tuple(tokens), payload, sha256_hex(payload), self.fingerprint, elapsed)

    def save_state(self) -> bytes:
        """The raw per-sequence state bytes of seq 0 as it stands."""
        return engine_state.read_state(self._ctx)

    def save_prefix(self, n: int) -> bytes:
        """The state of seq 0's first ``n`` cells, cut from the whole (the context is unchanged)."""
        return cut_payload(self.save_state(), n)

    cut_state = staticmethod(cut_state)

    def save_state_file(self, path: Union[str, Path], tokens: Sequence[int]) -> int:
        """Write seq 0 and its ``tokens`` with llama.cpp's own ``llama_state_seq_save_file``."""
        return engine_state.save_state_file(self._ctx, path, tokens)

    def load_state_file(self, path: Union[str, Path], n_tokens: int) -> float:
        """Load a file written by :meth:`save_state_file` (the native floor); return seconds.

        llama.cpp checks almost nothing here: use it only on files this runtime wrote.
        """
        self.reset()
        try:
            elapsed, self.n_past = engine_state.load_state_file(self._ctx, path, n_tokens)
        except EngineError:
            self.reset()
            raise
        self.held = None
        return elapsed

    def check_payload(self, state: KVState, block_id: str = "", *, verify_hash: bool = True) -> None:
        """Raise unless ``state`` may be handed to llama.cpp under this runtime."""
        check_state(
            state, self.fingerprint, self.n_ctx, self.state_size(state.n_tokens), block_id, verify_hash=verify_hash
        )

    def restore(self, state: KVState, block_id: str = "", *, verify_hash: bool = True) -> float:
        """Replace seq 0 with ``state`` at ``[0, N)``; return the seconds the native load took.

        ``verify_hash=False`` is for payloads already verified since they were read.
        """
        self.check_payload(state, block_id, verify_hash=verify_hash)
        # Forget the cells, not their bytes: write_state rewrites the cells it restores and the
        # attention mask hides the rest, as in llama.cpp's own state load; zeroing the whole
        # KV buffer (reset) cost ~9 ms per restore at 4,352 cells.
        self.reset(data=False)
        try:
            elapsed = engine_state.write_state(self._ctx, self._memory, state.payload, state.n_tokens, block_id)
        except RestoreRejectedError:
            self.reset()
            raise
        self.n_past, self.held = state.n_tokens, list(state.tokens)
        return elapsed

    def graft(
        self,
        state: KVState,
        query: Union[str, Sequence[int]],
        block_id: str = "",
        *,
        keep: Optional[int] = None,
        verify_hash: bool = True,
    ) -> np.ndarray:
        """Restore ``state`` at its own position and evaluate ``query`` after it: the graft.

        With ``keep`` < N only the first ``keep`` restored cells stay (the rest are removed,
        which is exact: a cell never depends on later ones) and ``query`` is evaluated at
        ``[keep, keep+q)``. Returns the last logits; :meth:`generate` continues from there.
        ``verify_hash=False`` is for payloads already verified since they were read.
        """
        tokens, keep = graft_tokens(self, state, query, keep)
        self.restore(state, block_id, verify_hash=verify_hash)
        if keep < state.n_tokens:
            try:
                self.keep_cells(keep)
            except EngineError:
                self.reset()
                raise
        self._decode(tokens, keep)
        return self.logits()

    def shift_positions(self, delta: int) -> None:
        """Move every cell of seq 0 by ``delta`` positions (llama.cpp K-shift). Not exact."""
        if not llama_cpp.llama_memory_can_shift(self._memory):
            raise EngineError(f"{self.model_name} cannot shift positions in this context")
        require_fits(self, self.n_past + delta, "shifted context")
        llama_cpp.llama_memory_seq_add(self._memory, SEQ, 0, -1, delta)
        self.n_past, self.held = self.n_past + delta, None

    # -- generation ----------------------------------------------------------------------

    def generate(self, options: SamplingOptions) -> Iterator[TokenStep]:
        """Sample up to ``options.max_tokens`` after what the context holds; stops at end of
        generation.

        ``temperature`` 0 is greedy. Sampling is seeded, so a seed reproduces a run.
        ``repeat_penalty`` > 1 discourages the last ``penalty_last_n`` generated tokens (as
        llama.cpp's sampler does); ``grammar`` (GBNF) constrains the text. Each step's
        log-probability and entropy are those of the model's own distribution, before the
        penalty and the grammar (see :mod:`skillgraft.core.sampling`).
        """
        constraint = self.text.grammar(options.grammar) if options.grammar else None
        try:
            yield from sample(self, options, constraint=constraint)
        finally:
            if constraint is not None:
                constraint.close()

    def check_grammar(self, gbnf: str) -> None:
        """Raise :class:`~skillgraft.errors.FormatError` unless llama.cpp parses ``gbnf``."""
        self.text.check_grammar(gbnf)
