"""State I/O of one llama.cpp sequence: read, write, file save and load, trim.

Thin, checked wrappers over llama.cpp's per-sequence state API for
:class:`~skillgraft.engine.llama.Engine`. They check only what llama.cpp reports back; the payload
checks (fingerprint, size, SHA-256) happen before, in :func:`skillgraft.core.states.check_state`.
"""

from __future__ import annotations

import ctypes
import time
from pathlib import Path
from typing import Sequence, Union

import llama_cpp

from ..errors import EngineError, RestoreRejectedError

SEQ = 0  # the one sequence every engine uses


def read_state(ctx) -> bytes:
    """The raw per-sequence state bytes of seq 0 as it stands."""
    size = llama_cpp.llama_state_seq_get_size(ctx, SEQ)
    buf = (ctypes.c_uint8 * size)()
    written = llama_cpp.llama_state_seq_get_data(ctx, buf, size, SEQ)
    if written != size:
        raise EngineError(f"llama.cpp wrote {written} of {size} state bytes")
    return ctypes.string_at(buf, written)


def state_size(ctx) -> int:
    """The size in bytes :func:`read_state` would return now."""
    return int(llama_cpp.llama_state_seq_get_size(ctx, SEQ))


def write_state(ctx, memory, payload: bytes, n_tokens: int, block_id: str = "") -> float:
    """Replace seq 0 with ``payload`` (a state of ``n_tokens``); return the seconds the load took.

    Raises :class:`RestoreRejectedError` unless llama.cpp read every byte and seq 0 then ends
    at position ``n_tokens - 1``. The caller clears the context first and after a failure.
    """
    source = ctypes.cast(ctypes.c_char_p(payload), ctypes.POINTER(ctypes.c_uint8))
    started = time.perf_counter()
    read = llama_cpp.llama_state_seq_set_data(ctx, source, len(payload), SEQ)
    elapsed = time.perf_counter() - started
    top = llama_cpp.llama_memory_seq_pos_max(memory, SEQ)
    if read != len(payload) or top != n_tokens - 1:
        raise RestoreRejectedError(block_id, len(payload), int(read), n_tokens, int(top))
    return elapsed


def drop_after(memory, keep: int, block_id: str = "") -> None:
    """Remove every cell of seq 0 from position ``keep`` on (exact: no cell depends on a later one)."""
    if not llama_cpp.llama_memory_seq_rm(memory, SEQ, keep, -1):
        raise EngineError(f"llama.cpp could not drop the cells after position {keep} of {block_id or 'a block'}")


def save_state_file(ctx, path: Union[str, Path], tokens: Sequence[int]) -> int:
    """Write seq 0 and its ``tokens`` with llama.cpp's own ``llama_state_seq_save_file``."""
    array = (llama_cpp.llama_token * max(1, len(tokens)))(*tokens)
    written = llama_cpp.llama_state_seq_save_file(ctx, str(path).encode(), SEQ, array, len(tokens))
    if not written:
        raise EngineError(f"llama.cpp could not write the state file {path}")
    return int(written)


def load_state_file(ctx, path: Union[str, Path], n_tokens: int) -> tuple[float, int]:
    """Load a file written by :func:`save_state_file`; return ``(seconds, tokens read)``.

    llama.cpp checks almost nothing here: use it only on files this runtime wrote.
    """
    tokens = (llama_cpp.llama_token * max(1, n_tokens))()
    count = ctypes.c_size_t(0)
    started = time.perf_counter()
    read = llama_cpp.llama_state_seq_load_file(ctx, str(path).encode(), SEQ, tokens, n_tokens, ctypes.byref(count))
    elapsed = time.perf_counter() - started
    if not read:
        raise EngineError(f"llama.cpp could not load the state file {path}")
    return elapsed, int(count.value)
