"""The llama.cpp backend as :class:`~skillgraft.engine.llama.Engine` sets it up.

Process-wide initialisation with native logs forwarded to :mod:`logging` (never straight to
stderr), the build facts a fingerprint records, the pinned context parameters and the KV
size a model's shape implies.
"""

from __future__ import annotations

import ctypes
import logging

import llama_cpp

from ..config import EngineSettings

_native_logger = logging.getLogger("skillgraft.llama_cpp")

_GGML_TYPES = {"f32": 0, "f16": 1, "q8_0": 8}
_KV_TYPE_BYTES = {"f32": 4.0, "f16": 2.0, "q8_0": 34 / 32}


@llama_cpp.llama_log_callback
def _forward_native_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    _native_logger.debug(text.decode("utf-8", "replace").rstrip())


_backend_ready = False


def init_backend() -> None:
    """Initialise llama.cpp once per process, its logs going to the ``skillgraft.llama_cpp`` logger."""
    global _backend_ready
    if not _backend_ready:
        llama_cpp.llama_log_set(_forward_native_log, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        _backend_ready = True


def build_info() -> dict[str, str]:
    """The llama.cpp build: llama-cpp-python version and native system info."""
    init_backend()
    return {
        "llama_cpp_python": llama_cpp.__version__,
        "system_info": llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip(),
    }


def ggml_type(kv_type: str) -> int:
    """The ggml type number of a KV cache type name (``f16``, ``f32``, ``q8_0``)."""
    return _GGML_TYPES[kv_type]


def context_params(settings: EngineSettings, swa_full: bool):
    """Context parameters with every setting that changes KV bytes or logits pinned: one sequence."""
    s = settings
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
    params.swa_full = swa_full
    params.kv_unified = False
    params.embeddings = False
    params.no_perf = True
    return params


def kv_bytes_per_token(model, text, settings: EngineSettings) -> float:
    """KV bytes per token implied by ``model``'s shape (``text``: its metadata) and the cache types."""
    arch = text.metadata("general.architecture") or "llama"
    n_layer = llama_cpp.llama_model_n_layer(model)
    n_head = llama_cpp.llama_model_n_head(model)
    n_head_kv = llama_cpp.llama_model_n_head_kv(model)
    n_embd = llama_cpp.llama_model_n_embd(model)
    k_len = int(text.metadata(f"{arch}.attention.key_length") or n_embd // n_head)
    v_len = int(text.metadata(f"{arch}.attention.value_length") or n_embd // n_head)
    return n_layer * n_head_kv * (k_len * _KV_TYPE_BYTES[settings.type_k] + v_len * _KV_TYPE_BYTES[settings.type_v])
