"""Payload digests: SHA-256 names a block, BLAKE3 verifies it fast on every read.

A block's id and file name come from the SHA-256 of its payload (bundles and old stores
rely on that). Since catalog migration 9 the store also records the payload's BLAKE3 when
it deposits a block, after checking the SHA-256 of the same bytes; a read from disk then
verifies the BLAKE3 (several times faster than SHA-256 and multi-threaded on large
payloads). A row without one (a block stored before the migration) is verified by its
SHA-256, so old blocks stay valid. Either way every byte is checked before it can reach
llama.cpp. Hashing chunk by chunk while reading was measured slower than one read and one
BLAKE3 pass (the chunks' buffer must then be copied into an immutable payload).

``SKILLGRAFT_HEAP_TUNING=0`` turns off :func:`reuse_freed_payload_memory`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import os
import sys
from typing import Optional

from .sha import SHA256_HEX

__all__ = [
    "blake3_hex",
    "file_digest_problem",
    "payload_problem",
    "reuse_freed_payload_memory",
]

# Below this size one thread hashes faster than starting several.
THREADED_ABOVE = 1 << 20
# Allocations up to this size come from the heap, and up to this much freed heap is kept.
HEAP_PAYLOAD_BYTES = 512 << 20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_heap_tuned: Optional[bool] = None


def _blake3(data=b"", size: int = 0):
    from blake3 import blake3

    return blake3(data, max_threads=blake3.AUTO if size > THREADED_ABOVE else 1)


def blake3_hex(payload: bytes) -> str:
    """The BLAKE3 hex digest (256 bits) of ``payload``."""
    return _blake3(payload, len(payload)).hexdigest()


def payload_problem(payload: bytes, n_bytes: int, sha256: str, blake3: Optional[str] = None) -> Optional[str]:
    """None when ``payload`` has ``n_bytes`` and hashes to ``blake3`` (when recorded) or else
    to ``sha256``; otherwise what is wrong with it."""
    if len(payload) != n_bytes:
        return f"{len(payload)} bytes, expected {n_bytes}"
    if blake3 is not None:
        return None if blake3_hex(payload) == blake3 else "BLAKE3 mismatch"
    return None if hashlib.sha256(payload).hexdigest() == sha256 else "SHA-256 mismatch"


def file_digest_problem(blake3: Optional[str]) -> Optional[str]:
    """What is wrong with a recorded BLAKE3 digest, or None (absent is fine)."""
    if blake3 is None or (isinstance(blake3, str) and SHA256_HEX.fullmatch(blake3)):
        return None
    return f"blake3 {str(blake3)[:80]!r} is not a BLAKE3 hex digest"


def reuse_freed_payload_memory() -> bool:
    """Let a payload read reuse the memory of payloads freed before it (glibc only).

    glibc maps every allocation above 32 MB afresh and unmaps it when freed, so each read
    of a large block touches new zero pages: one page fault per 4 KB, more than the read
    and the BLAKE3 together (measured: 94 MB read in 45 ms, 17 ms into reused memory).
    This raises glibc's mmap and trim thresholds to ``HEAP_PAYLOAD_BYTES`` for the
    process, so freed payloads stay in the heap for the next read; the resident size
    then stays at its peak instead of shrinking. Returns whether it applied; once per process.
    """
    global _heap_tuned
    if _heap_tuned is None:
        _heap_tuned = False
        if sys.platform.startswith("linux") and os.environ.get("SKILLGRAFT_HEAP_TUNING", "1") != "0":
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                mallopt = libc.mallopt
            except (OSError, AttributeError):  # musl and others have no mallopt
                return False
            _heap_tuned = bool(mallopt(_M_MMAP_THRESHOLD, HEAP_PAYLOAD_BYTES)) and bool(
                mallopt(_M_TRIM_THRESHOLD, HEAP_PAYLOAD_BYTES)
            )
    return _heap_tuned
