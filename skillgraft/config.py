"""Settings: where the store lives and how the llama.cpp context is pinned.

Every default is defined here once. Environment variables start with ``SKILLGRAFT_``:
``SKILLGRAFT_HOME`` (store folder, default ``~/.skillgraft``), ``SKILLGRAFT_MODEL``
(model name or GGUF path, default ``smollm2-135m``), and the engine settings
``SKILLGRAFT_THREADS``, ``SKILLGRAFT_N_CTX``, ``SKILLGRAFT_N_GPU_LAYERS``,
``SKILLGRAFT_KV_TYPE`` (the KV cache type of keys and values, see :func:`kv_type_settings`) and
``SKILLGRAFT_FLASH_ATTN`` (``on`` or ``off``, the default).
Files made once per machine (assembled models, built binaries) live under ``SKILLGRAFT_CACHE_DIR``
(default ``$XDG_CACHE_HOME/skillgraft`` or ``~/.cache/skillgraft``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, Optional, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import ConfigError

__all__ = [
    "CONTEXT_PADDING", "DEFAULT_CONTEXT_CAP", "DEFAULT_HOME", "DEFAULT_MODEL", "DEFAULT_THREADS", "EngineSettings",
    "FALLBACK_CONTEXT", "MAX_CONTEXT", "KVType", "KV_TYPES", "QUANTIZED_KV_TYPES",
    "SETTINGS_ENV", "cache_root", "default_home", "default_model", "engine_settings", "kv_type_settings",
]

DEFAULT_MODEL = "smollm2-135m"
DEFAULT_HOME = Path("~/.skillgraft")
# llama.cpp's worker threads spin while they wait, so on a machine whose cores also run
# other work (the embedder, other agents) fewer threads are faster and far steadier: measured
# under load on 2 cores, 1 thread generated 32 tokens 2.2-4x faster than 2 (docs/benchmarks.md).
# Half the cores, at least one, leaves room for the rest of the app.
DEFAULT_THREADS = max(1, (os.cpu_count() or 2) // 2)

KVType = Literal["f16", "f32", "q8_0"]
KV_TYPES: tuple[str, ...] = get_args(KVType)
# Cache types stored in blocks of values with a scale; llama.cpp quantizes the V cache only
# with flash attention on (without it, it refuses to create the context).
QUANTIZED_KV_TYPES = frozenset({"q8_0"})


# The context window when none is given: the model's own (llama-server's default, ``-c 0``), at
# most this many tokens, so a chat the bare server answers is answered here too. llama.cpp
# pads a window to a multiple of CONTEXT_PADDING; the window is in no fingerprint (measured:
# it changes neither payloads nor logits, docs/limits.md).
DEFAULT_CONTEXT_CAP = 32768
FALLBACK_CONTEXT = 4096
CONTEXT_PADDING = 256
MAX_CONTEXT = 131072


def _padded(n_ctx: int) -> int:
    return -(-n_ctx // CONTEXT_PADDING) * CONTEXT_PADDING


class EngineSettings(BaseModel):
    """How a llama.cpp context is pinned. The fingerprint holds every field that changes a payload
    or the logits: all but the thread count and the window (docs/limits.md)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    n_ctx: Optional[int] = Field(
        None, ge=64, le=MAX_CONTEXT,
        description="context window in tokens (a multiple of 256); None: the model's own, at most DEFAULT_CONTEXT_CAP",
    )
    n_batch: int = Field(512, ge=1, description="tokens per llama_decode call")
    n_ubatch: int = Field(512, ge=1, description="tokens per compute micro-batch")
    n_threads: int = Field(DEFAULT_THREADS, ge=1, le=256, description="pinned CPU threads")
    flash_attn: bool = Field(False, description="flash attention, pinned on or off (never auto)")
    swa_full: Optional[bool] = Field(
        None, description="full-size sliding-window cache; None forces it on for SWA models"
    )
    type_k: KVType = "f16"
    type_v: KVType = "f16"
    n_gpu_layers: int = Field(0, ge=0, description="layers offloaded to an accelerator")

    @field_validator("n_ctx")
    @classmethod
    def _context_padded(cls, value: Optional[int]) -> Optional[int]:
        """llama.cpp pads a context to a multiple of its KV padding (256); say so up front."""
        return None if value is None else _padded(value)

    def for_model(self, context_length: int, slots: int = 1) -> "EngineSettings":
        """These settings with the window of each of ``slots`` slots decided: the one given, else
        the model's own context (``context_length``, from its GGUF) at most
        :data:`DEFAULT_CONTEXT_CAP` (:data:`FALLBACK_CONTEXT` when the model records none),
        divided among the slots, as llama-server's default (``-c 0 -np slots``) divides it."""
        if self.n_ctx is not None:
            return self
        own = min(context_length, DEFAULT_CONTEXT_CAP) if context_length > 0 else FALLBACK_CONTEXT
        return self.model_copy(update={"n_ctx": max(CONTEXT_PADDING, _padded(own // max(1, slots)))})

    @field_validator("n_ubatch")
    @classmethod
    def _ubatch_not_above_batch(cls, value: int, info) -> int:
        n_batch = info.data.get("n_batch", value)
        if value > n_batch:
            raise ValueError(f"n_ubatch ({value}) must not exceed n_batch ({n_batch})")
        return value

    @model_validator(mode="after")
    def _quantized_v_needs_flash_attention(self) -> "EngineSettings":
        if self.type_v in QUANTIZED_KV_TYPES and not self.flash_attn:
            raise ConfigError(
                f"a {self.type_v} V cache needs flash_attn=True: llama.cpp quantizes the V cache only "
                "with flash attention on"
            )
        return self


def kv_type_settings(kv_type: Optional[str]) -> dict:
    """The settings one KV cache type implies: ``type_k`` and ``type_v`` both set to it, and
    flash attention on for a quantized type (llama.cpp needs it for a quantized V cache).
    ``None`` implies nothing."""
    if kv_type is None:
        return {}
    if kv_type not in KV_TYPES:
        raise ConfigError(f"unknown KV cache type {kv_type!r}; choose one of {', '.join(KV_TYPES)}")
    settings: dict = {"type_k": kv_type, "type_v": kv_type}
    if kv_type in QUANTIZED_KV_TYPES:
        settings["flash_attn"] = True
    return settings


# SKILLGRAFT_FLASH_ATTN's values. Off by default: on 2 cores it prefills a long prompt 7-25 % faster
# and a short continuation 5-20 % slower than off (docs/benchmarks.md, "flash attention").
_FLASH_ATTN_VALUES = {"on": True, "off": False}

# Engine settings an environment variable may give (every door reads them: CLI, gateway, MCP, API).
SETTINGS_ENV = {"SKILLGRAFT_THREADS": "n_threads", "SKILLGRAFT_N_CTX": "n_ctx", "SKILLGRAFT_N_GPU_LAYERS": "n_gpu_layers"}


def engine_settings(**overrides) -> EngineSettings:
    """Engine settings from the environment and keyword overrides, with a clear error."""
    values: dict = {}
    for variable, name in SETTINGS_ENV.items():
        given = os.environ.get(variable)
        if given:
            try:
                values[name] = int(given)
            except ValueError:
                raise ConfigError(f"{variable} must be an integer, got {given!r}") from None
    kv_type = os.environ.get("SKILLGRAFT_KV_TYPE")
    if kv_type and kv_type not in KV_TYPES:
        raise ConfigError(f"SKILLGRAFT_KV_TYPE must be one of {', '.join(KV_TYPES)}, got {kv_type!r}")
    values.update(kv_type_settings(kv_type or None))
    flash = os.environ.get("SKILLGRAFT_FLASH_ATTN")
    if flash:
        if flash not in _FLASH_ATTN_VALUES:
            raise ConfigError(f"SKILLGRAFT_FLASH_ATTN must be on or off, got {flash!r}")
        values["flash_attn"] = _FLASH_ATTN_VALUES[flash]
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return EngineSettings(**values)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "settings"
        raise ConfigError(f"invalid engine setting {field}: {first['msg']}") from None


def default_model() -> str:
    """The model name or GGUF path used when none is given."""
    return os.environ.get("SKILLGRAFT_MODEL") or DEFAULT_MODEL


def default_home() -> Path:
    """The store folder used when none is given."""
    return Path(os.environ.get("SKILLGRAFT_HOME") or DEFAULT_HOME).expanduser()


def cache_root() -> Path:
    """The per-machine cache folder: ``$SKILLGRAFT_CACHE_DIR``, else ``$XDG_CACHE_HOME/skillgraft``."""
    configured = os.environ.get("SKILLGRAFT_CACHE_DIR")
    if configured:
        return Path(configured).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "skillgraft"
