"""The graft engine: the only module that imports ``llama_cpp``.

One pinned, deterministic llama.cpp context with a single sequence (seq 0). It can
prefill tokens, capture the sequence's KV state (the per-sequence API: no logits
arrays), restore a captured state at its own positions ``[0, N)``, evaluate a query at
``[N, N+q)`` and generate from there. Payloads are checked for size, SHA-256 and
runtime fingerprint *before* their bytes reach llama.cpp, which checks almost nothing.

An :class:`Engine` is not thread-safe: use one per thread or guard it with a lock.
"""

from __future__ import annotations

import codecs
import ctypes
import logging
import time
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence, Union

import numpy as np

import llama_cpp

from .config import EngineSettings, default_model, engine_settings
from .errors import (
    ConfigError,
    ContextOverflowError,
    EngineError,
    InputError,
)
from .fingerprint import RuntimeFingerprint, file_sha256
from .models import resolve_model
from .states import KVState, TokenStep, check_state, sha256_hex

logger = logging.getLogger("skillgraft.engine")
_native_logger = logging.getLogger("skillgraft.llama_cpp")

_GGML_TYPES = {"f32": 0, "f16": 1, "q8_0": 8}
_KV_TYPE_BYTES = {"f32": 4.0, "f16": 2.0, "q8_0": 34 / 32}
Progress = Optional[Callable[[int, int], None]]
SEQ = 0  # the one sequence every engine uses
# llama.cpp's built-in chat templates, for GGUFs that carry none.
_BUILTIN_TEMPLATES = {"gemma": b"gemma", "llama": b"llama3", "phi": b"phi3"}


@llama_cpp.llama_log_callback
def _forward_native_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    # llama.cpp logs go to the logging module, never straight to stderr.
    _native_logger.debug(text.decode("utf-8", "replace").rstrip())


_backend_ready = False


def _init_backend() -> None:
    global _backend_ready
    if not _backend_ready:
        llama_cpp.llama_log_set(_forward_native_log, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        _backend_ready = True


def build_info() -> dict[str, str]:
    """The llama.cpp build: llama-cpp-python version and native system info."""
    _init_backend()
    return {
        "llama_cpp_python": llama_cpp.__version__,
        "system_info": llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip(),
    }


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Log-probabilities in float64 from raw logits."""
    values = logits.astype(np.float64)
    values -= values.max()
    return values - np.log(np.exp(values).sum())


class Engine:
    """A pinned llama.cpp context over one GGUF model.

    ``model`` is an embedded model name (``smollm2-135m``, ``gemma3-270m``) or a GGUF path.
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
        self.settings = settings or engine_settings()
        _init_backend()
        self._model = self._ctx = self._batch = None
        model_params = llama_cpp.llama_model_default_params()
        model_params.n_gpu_layers = self.settings.n_gpu_layers
        # No extra buffer types (AMX, repacked weights): the AMX kernels crash on hosts that do
        # not grant AMX tile state, and llama-server runs with --no-repack to match.
        model_params.use_extra_bufts = False
        self._model = llama_cpp.llama_model_load_from_file(str(self.model_path).encode(), model_params)
        if not self._model:
            raise EngineError(f"llama.cpp could not load the model file {self.model_path}")
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self._vocab)
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
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = s.n_ctx
        params.n_batch = s.n_batch
        params.n_ubatch = s.n_ubatch
        params.n_seq_max = 1
        params.n_threads = s.n_threads
        params.n_threads_batch = s.n_threads
        params.flash_attn_type = (
            llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if s.flash_attn else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        params.type_k = _GGML_TYPES[s.type_k]
        params.type_v = _GGML_TYPES[s.type_v]
        params.swa_full = self.swa_full
        params.kv_unified = False
        params.embeddings = False
        params.no_perf = True
        self._ctx = llama_cpp.llama_init_from_model(self._model, params)
        if not self._ctx:
            self.close()
            raise EngineError(
                f"llama.cpp could not create a context (n_ctx {s.n_ctx}, n_batch {s.n_batch}) for {self.model_name}"
            )
        self.n_ctx = int(llama_cpp.llama_n_ctx(self._ctx))
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(s.n_batch, 0, 1)
        self.n_past = 0
        self._has_logits = False

    def _build_fingerprint(self) -> RuntimeFingerprint:
        s = self.settings
        info = build_info()
        return RuntimeFingerprint(
            gguf_sha256=file_sha256(self.model_path),
            llama_cpp_python=info["llama_cpp_python"],
            system_info=info["system_info"],
            n_ctx=self.n_ctx,
            n_batch=s.n_batch,
            n_ubatch=s.n_ubatch,
            type_k=s.type_k,
            type_v=s.type_v,
            flash_attn=s.flash_attn,
            swa_full=self.swa_full,
            n_gpu_layers=s.n_gpu_layers,
            backend="gpu" if s.n_gpu_layers and llama_cpp.llama_supports_gpu_offload() else "cpu",
        )

    def _measure_state_layout(self) -> tuple[int, int]:
        """Header and per-token bytes of a seq-0 state, from states of 1 and 2 tokens."""
        probe = self.tokenize("a b", add_bos=False)[:1] or [0]
        sizes = []
        for n in (1, 2):
            self.reset()
            self._decode(probe * n, 0)
            sizes.append(int(llama_cpp.llama_state_seq_get_size(self._ctx, SEQ)))
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
        buf = ctypes.create_string_buffer(4096)
        n = llama_cpp.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", "replace") if n >= 0 else None

    @property
    def kv_bytes_per_token(self) -> float:
        """KV bytes per token implied by the model's shape and the cache types."""
        arch = self.metadata("general.architecture") or "llama"
        n_layer = llama_cpp.llama_model_n_layer(self._model)
        n_head = llama_cpp.llama_model_n_head(self._model)
        n_head_kv = llama_cpp.llama_model_n_head_kv(self._model)
        n_embd = llama_cpp.llama_model_n_embd(self._model)
        k_len = int(self.metadata(f"{arch}.attention.key_length") or n_embd // n_head)
        v_len = int(self.metadata(f"{arch}.attention.value_length") or n_embd // n_head)
        s = self.settings
        return n_layer * n_head_kv * (k_len * _KV_TYPE_BYTES[s.type_k] + v_len * _KV_TYPE_BYTES[s.type_v])

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

    # -- tokens ----------------------------------------------------------------------------

    def tokenize(self, text: str, *, add_bos: bool = True, special: bool = True) -> list[int]:
        """Token ids of ``text``; ``special`` parses control tokens such as ``<|im_start|>``."""
        if not isinstance(text, str):
            raise InputError(f"text must be str, got {type(text).__name__}")
        data = text.encode("utf-8")
        capacity = len(data) + 16
        while True:
            buf = (llama_cpp.llama_token * capacity)()
            n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buf, capacity, add_bos, special)
            if n >= 0:
                return list(buf[:n])
            capacity = -n

    def piece(self, token: int) -> bytes:
        """The bytes of one token (control tokens rendered as empty)."""
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
        return buf.raw[:n]

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", "replace")

    def is_end_of_generation(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    def chat_prompt(self, messages: Sequence[tuple[str, str]], *, add_generation_prompt: bool = True) -> str:
        """Render ``[(role, content), ...]`` with the model's own chat template."""
        template = llama_cpp.llama_model_chat_template(self._model, None)
        if not template:
            arch = self.metadata("general.architecture") or ""
            template = _BUILTIN_TEMPLATES.get(arch.rstrip("0123456789"), b"chatml")
        for role, content in messages:
            if "\x00" in role or "\x00" in content:
                raise InputError(f"a {role!r} message contains a NUL byte, which would cut it short")
        encoded = [(role.encode(), content.encode("utf-8")) for role, content in messages]
        chat = (llama_cpp.llama_chat_message * len(encoded))(*[llama_cpp.llama_chat_message(r, c) for r, c in encoded])
        size = 2 * sum(len(c) + len(r) for r, c in encoded) + 1024
        for _ in range(2):
            buf = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_chat_apply_template(template, chat, len(encoded), add_generation_prompt, buf, size)
            if n < 0:
                raise EngineError(f"llama.cpp does not support the chat template of {self.model_name}")
            if n <= size:
                return buf.raw[:n].decode("utf-8", "replace")
            size = n + 1
        raise EngineError("chat template output kept growing")

    def chat_split(self, system: str, user: str = "") -> tuple[str, str]:
        """Split a chat of one system and one user message where the user's text begins.

        Returns ``(prefix, turn)``: the prefix (system text included) is what a block
        captures; the turn is ``user`` plus the template's closing and generation prompt.
        """
        marker = "\x1fskillgraft-user\x1f"
        rendered = self.chat_prompt([("system", system), ("user", marker)])
        head, found, tail = rendered.partition(marker)
        if not found:
            raise EngineError(f"the chat template of {self.model_name} dropped the user message")
        return head, user + tail

    # -- decoding --------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget every cell of the context."""
        llama_cpp.llama_memory_clear(self._memory, True)
        self.n_past = 0
        self._has_logits = False

    def _require_fits(self, n_tokens: int, what: str = "text") -> None:
        if n_tokens > self.n_ctx:
            raise ContextOverflowError(n_tokens, self.n_ctx, what)

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
        self.n_past = start + len(tokens)
        self._has_logits = True

    def append(self, tokens: Sequence[int]) -> None:
        """Decode ``tokens`` after what the context holds (at ``[n_past, n_past+len)``)."""
        tokens = list(tokens)
        if not tokens:
            raise InputError("nothing to decode: the token list is empty")
        self._require_fits(self.n_past + len(tokens), "context plus query")
        self._decode(tokens, self.n_past)

    def prefill(self, tokens: Sequence[int], progress: Progress = None, *, start: int = 0) -> None:
        """Reset and decode ``tokens`` at ``[start, start+len)``; ``progress(done, total)`` per chunk.

        ``start`` > 0 computes the tokens at shifted positions (a control for exactness
        measurements: such a state is not what a block at its own position holds).
        """
        tokens = list(tokens)
        if not tokens:
            raise InputError("nothing to prefill: the text has no tokens")
        if start < 0:
            raise InputError(f"start must be >= 0, got {start}")
        self._require_fits(start + len(tokens))
        self.reset()
        self._decode(tokens, start, progress)

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
        tokens = self.tokenize(source) if isinstance(source, str) else [int(t) for t in source]
        if not tokens:
            raise InputError("cannot capture an empty text")
        self._require_fits(len(tokens) + 1, "text plus one query token")
        started = time.perf_counter()
        self.prefill(tokens, progress)
        payload = self.save_state()
        elapsed = time.perf_counter() - started
        return KVState(tuple(tokens), payload, sha256_hex(payload), self.fingerprint, elapsed)

    def save_state(self) -> bytes:
        """The raw per-sequence state bytes of seq 0 as it stands."""
        size = llama_cpp.llama_state_seq_get_size(self._ctx, SEQ)
        buf = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_seq_get_data(self._ctx, buf, size, SEQ)
        if written != size:
            raise EngineError(f"llama.cpp wrote {written} of {size} state bytes")
        return ctypes.string_at(buf, written)

    def save_state_file(self, path: Union[str, Path], tokens: Sequence[int]) -> int:
        """Write seq 0 and its ``tokens`` with llama.cpp's own ``llama_state_seq_save_file``."""
        array = (llama_cpp.llama_token * max(1, len(tokens)))(*tokens)
        written = llama_cpp.llama_state_seq_save_file(self._ctx, str(path).encode(), SEQ, array, len(tokens))
        if not written:
            raise EngineError(f"llama.cpp could not write the state file {path}")
        return int(written)

    def load_state_file(self, path: Union[str, Path], n_tokens: int) -> float:
        """Load a file written by :meth:`save_state_file` (the native floor); return seconds.

        llama.cpp checks almost nothing here: use it only on files this runtime wrote.
        """
        self.reset()
        tokens = (llama_cpp.llama_token * max(1, n_tokens))()
        count = ctypes.c_size_t(0)
        started = time.perf_counter()
        read = llama_cpp.llama_state_seq_load_file(
            self._ctx, str(path).encode(), SEQ, tokens, n_tokens, ctypes.byref(count)
        )
        elapsed = time.perf_counter() - started
        if not read:
            self.reset()
            raise EngineError(f"llama.cpp could not load the state file {path}")
        self.n_past = int(count.value)
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
        self.reset()
        source = ctypes.cast(ctypes.c_char_p(state.payload), ctypes.POINTER(ctypes.c_uint8))
        started = time.perf_counter()
        read = llama_cpp.llama_state_seq_set_data(self._ctx, source, len(state.payload), SEQ)
        elapsed = time.perf_counter() - started
        top = llama_cpp.llama_memory_seq_pos_max(self._memory, SEQ)
        if read != len(state.payload) or top != state.n_tokens - 1:
            self.reset()
            raise EngineError(
                f"llama.cpp rejected the state of {block_id or 'a block'}: read {read} of "
                f"{len(state.payload)} bytes, last position {top} instead of {state.n_tokens - 1}"
            )
        self.n_past = state.n_tokens
        self._has_logits = False
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
        tokens = self.tokenize(query, add_bos=False) if isinstance(query, str) else list(query)
        if not tokens:
            raise InputError("the query has no tokens")
        keep = state.n_tokens if keep is None else keep
        if not 0 < keep <= state.n_tokens:
            raise InputError(f"keep must be within 1..{state.n_tokens}, got {keep}")
        self._require_fits(keep + len(tokens), "block plus query")
        self.restore(state, block_id, verify_hash=verify_hash)
        if keep < state.n_tokens:
            if not llama_cpp.llama_memory_seq_rm(self._memory, SEQ, keep, -1):
                self.reset()
                raise EngineError(f"llama.cpp could not drop the cells after position {keep} of {block_id or 'a block'}")
            self.n_past = keep
        self._decode(tokens, keep)
        return self.logits()

    def shift_positions(self, delta: int) -> None:
        """Move every cell of seq 0 by ``delta`` positions (llama.cpp K-shift). Not exact."""
        if not llama_cpp.llama_memory_can_shift(self._memory):
            raise EngineError(f"{self.model_name} cannot shift positions in this context")
        self._require_fits(self.n_past + delta, "shifted context")
        llama_cpp.llama_memory_seq_add(self._memory, SEQ, 0, -1, delta)
        self.n_past += delta

    # -- generation ------------------------------------------------------------------------

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
        """Sample up to ``max_tokens`` after what the context holds; stops at end of generation.

        ``temperature`` 0 is greedy. Sampling is seeded, so a seed reproduces a run.
        ``repeat_penalty`` > 1 discourages the last ``penalty_last_n`` generated tokens (as
        llama.cpp's sampler does). Each step's log-probability and entropy are those of the
        model's own distribution, before the penalty.
        """
        if max_tokens < 0:
            raise InputError(f"max_tokens must be >= 0, got {max_tokens}")
        rng = np.random.default_rng(seed)
        recent: list[int] = []
        # A character may span tokens: each step carries the text its token completes.
        text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        for _ in range(max_tokens):
            logits = self.logits()
            logprobs = log_softmax(logits)
            probs = np.exp(logprobs)
            entropy = float(-(probs * logprobs).sum())
            if repeat_penalty != 1.0 and recent:
                seen = np.fromiter(set(recent[-penalty_last_n:]), dtype=np.int64)
                logits[seen] = np.where(logits[seen] > 0, logits[seen] / repeat_penalty, logits[seen] * repeat_penalty)
                token = self._pick(log_softmax(logits), temperature, top_p, rng)
            else:
                token = self._pick(logprobs, temperature, top_p, rng)
            if self.is_end_of_generation(token):
                return
            piece = text.decode(self.piece(token))
            if self.n_past + 1 > self.n_ctx:
                return
            self._decode([token], self.n_past)
            recent.append(token)
            yield TokenStep(token, piece, float(logprobs[token]), entropy)

    @staticmethod
    def _pick(logprobs: np.ndarray, temperature: float, top_p: float, rng: np.random.Generator) -> int:
        if temperature <= 0:
            return int(np.argmax(logprobs))
        scaled = logprobs / temperature
        probs = np.exp(scaled - scaled.max())
        probs /= probs.sum()
        order = np.argsort(-probs)
        keep = order[: int(np.searchsorted(np.cumsum(probs[order]), top_p) + 1)]
        kept = probs[keep] / probs[keep].sum()
        return int(rng.choice(keep, p=kept))
