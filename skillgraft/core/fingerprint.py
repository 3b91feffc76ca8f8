"""RuntimeFingerprint: everything that must match for a graft to be exact.

A block records the fingerprint it was captured under and may only be grafted into a
context with an equal fingerprint. The engine builds it; this module only compares.
"""

from __future__ import annotations

import hashlib
from functools import cached_property
import json
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, model_validator

from ..errors import FingerprintMismatchError

# Bumped whenever the layout of a captured payload (or what it is paired with) changes.
STATE_FORMAT_VERSION = 1
# Recorded by earlier versions, then measured to leave payloads and logits byte-identical
# (tests/test_fingerprint_fields.py): the thread count and the context window (llama.cpp
# attends over the cells in use, padded to 256, whatever the window's size).
RETIRED_FIELDS = frozenset({"n_threads", "n_ctx"})


class RuntimeFingerprint(BaseModel):
    """The runtime a KV state belongs to (DESIGN §5)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gguf_sha256: str
    llama_cpp_python: str
    system_info: str
    state_format: int = STATE_FORMAT_VERSION
    n_batch: int
    n_ubatch: int
    type_k: str
    type_v: str
    flash_attn: bool
    swa_full: bool
    n_seq_max: int = 1
    kv_unified: bool = False
    n_gpu_layers: int = 0
    backend: str = "cpu"
    rope_freq_base: float = 0.0
    rope_freq_scale: float = 0.0
    lora: tuple[str, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _drop_retired_fields(cls, data):
        """Fields once recorded but shown not to change payloads or logits are ignored."""
        if isinstance(data, dict) and RETIRED_FIELDS & data.keys():
            data = {k: v for k, v in data.items() if k not in RETIRED_FIELDS}
        return data

    @cached_property
    def id(self) -> str:
        """A short stable id: SHA-256 of the canonical JSON, first 16 hex digits (the model is frozen)."""
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()[:16]

    def canonical_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    def differences(self, other: "RuntimeFingerprint") -> dict[str, tuple[object, object]]:
        """Fields whose values differ: ``{field: (self_value, other_value)}``."""
        mine, theirs = self.model_dump(), other.model_dump()
        return {key: (mine[key], theirs[key]) for key in mine if mine[key] != theirs[key]}

    def require_equal(self, runtime: "RuntimeFingerprint", block_id: str = "") -> None:
        """Raise :class:`FingerprintMismatchError` unless ``runtime`` equals this one."""
        differences = self.differences(runtime)
        if differences:
            raise FingerprintMismatchError(differences, block_id=block_id)


def backend_of(n_gpu_layers: int, gpu_offload: bool) -> str:
    """The ``backend`` field, the same for every engine: ``gpu`` when layers are offloaded and
    the runtime's llama.cpp supports GPU offload (``llama_supports_gpu_offload``), else ``cpu``."""
    return "gpu" if n_gpu_layers and gpu_offload else "cpu"


@lru_cache(maxsize=16)
def _file_sha256_cached(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    """SHA-256 of a file, remembered for as long as its size and mtime stay the same."""
    stat = Path(path).stat()
    return _file_sha256_cached(str(path), stat.st_size, stat.st_mtime_ns)
