"""Value records shared by engines and the store, and the checks every engine makes before a
capture or a graft reaches native code: no llama.cpp, no torch."""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Protocol, runtime_checkable

from ..errors import BlockIntegrityError, ContextOverflowError, InputError
from .fingerprint import RuntimeFingerprint


@runtime_checkable
class StateRef(Protocol):
    """Where a state's payload lies: in memory (:class:`BytesRef`), in a file (:class:`FileRef`),
    or (a backend's own) resident where it is used. ``n_bytes`` is known without reading it."""

    n_bytes: int

    def read(self) -> bytes:
        """The payload's bytes."""
        ...


@dataclass(frozen=True)
class BytesRef:
    """A payload held in memory."""

    data: bytes = field(repr=False)

    @property
    def n_bytes(self) -> int:
        return len(self.data)

    def read(self) -> bytes:
        return self.data


@dataclass(frozen=True)
class FileRef:
    """A payload of ``n_bytes`` at ``offset`` in a file, read only when asked for and then
    checked against ``sha256`` (when given) on every read: a file gone, cut short, swapped or
    not a regular file is a :class:`BlockIntegrityError`, never bytes handed on."""

    path: Path
    offset: int
    n_bytes: int
    sha256: str = ""

    def read(self) -> bytes:
        data = {"n_bytes": self.n_bytes, "sha256": self.sha256}
        try:
            with open_regular(self.path) as handle:
                handle.seek(self.offset)
                payload = handle.read(self.n_bytes)
        except OSError as exc:
            raise BlockIntegrityError(f"the payload in {Path(self.path).name} cannot be read: {exc}", **data) from None
        if len(payload) != self.n_bytes:
            raise BlockIntegrityError(f"{Path(self.path).name} holds {len(payload)} of the payload's {self.n_bytes} bytes",
                                      **data)
        if self.sha256 and sha256_hex(payload) != self.sha256:
            raise BlockIntegrityError(f"the payload in {Path(self.path).name} does not match its SHA-256 "
                                      f"{self.sha256[:16]}…", **data)
        return payload


@dataclass(frozen=True)
class ReadOnUse:
    """A payload of ``n_bytes`` that ``reader`` reads (and checks) only when it is asked for,
    each time: a stored block's, whose cells an answer may already hold."""

    n_bytes: int
    reader: Callable[[], bytes] = field(repr=False, compare=False)

    def read(self) -> bytes:
        return self.reader()


def open_regular(path: Path):
    """``path`` opened for reading, never through a link nor into a FIFO or device (OSError)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{Path(path).name} is not a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


WRITE_CHUNK = 1 << 20


def write_in_chunks(handle, data) -> None:
    """Write ``data`` to the binary file ``handle`` a chunk at a time: one write of tens of MB
    can cost the kernel far more than the same bytes in 1 MiB writes (0.5 s against 15 ms for a
    47 MB state on a virtual disk measured here)."""
    view = memoryview(data)
    for start in range(0, len(view), WRITE_CHUNK):
        handle.write(view[start:start + WRITE_CHUNK])


@dataclass(frozen=True)
class KVState:
    """A captured KV state of seq 0 over ``tokens`` at positions ``[0, N)``; its payload lies
    where ``ref`` says (bytes given here are held in memory), ``payload`` reads it."""

    tokens: tuple[int, ...]
    ref: StateRef = field(repr=False)
    sha256: str
    fingerprint: RuntimeFingerprint
    capture_s: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.ref, (bytes, bytearray, memoryview)):
            object.__setattr__(self, "ref", BytesRef(bytes(self.ref)))

    @property
    def payload(self) -> bytes:
        return self.ref.read()

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def n_bytes(self) -> int:
        return self.ref.n_bytes


@dataclass(frozen=True)
class TokenStep:
    """One generated token with its log-probability and the entropy it was drawn from.

    ``piece`` is the text the token completes: empty while a multi-byte character is
    still partial, so joining the pieces gives valid text.
    """

    token: int
    piece: str
    logprob: float
    entropy: float


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_state(
    state: KVState,
    fingerprint: RuntimeFingerprint,
    n_ctx: int,
    expected_bytes: Optional[int],
    block_id: str = "",
    *,
    verify_hash: bool = True,
) -> None:
    """Raise unless ``state`` may be handed to an engine: its fingerprint equal to the
    runtime's, some tokens, room for one query token within ``n_ctx``, ``expected_bytes``
    (when the engine can tell) and, with ``verify_hash``, its SHA-256. Every engine calls
    this before a byte of a payload reaches native code, which checks almost nothing."""
    subject = f"block {block_id}" if block_id else "state"
    state.fingerprint.require_equal(fingerprint, block_id)
    data = {"block_id": block_id, "n_bytes": state.n_bytes, "expected_bytes": expected_bytes, "sha256": state.sha256}
    if not state.tokens:
        raise BlockIntegrityError(f"{subject} has no tokens", **data)
    if state.n_tokens + 1 > n_ctx:
        raise ContextOverflowError(state.n_tokens + 1, n_ctx, f"{subject} plus one query token")
    if expected_bytes is not None and state.n_bytes != expected_bytes:
        raise BlockIntegrityError(
            f"{subject} payload is {state.n_bytes} bytes but {state.n_tokens} tokens need {expected_bytes}", **data
        )
    if verify_hash and sha256_hex(state.payload) != state.sha256:
        raise BlockIntegrityError(f"{subject} payload does not match its SHA-256 {state.sha256[:16]}…", **data)


def require_fits(engine, n_tokens: int, what: str = "text") -> None:
    """Raise :class:`ContextOverflowError` unless ``n_tokens`` fit ``engine.n_ctx``."""
    if n_tokens > engine.n_ctx:
        raise ContextOverflowError(n_tokens, engine.n_ctx, what)


def prefill_tokens(engine, tokens, start: int = 0) -> list[int]:
    """``tokens`` as a list, checked for a prefill at ``[start, start+len)``."""
    tokens = list(tokens)
    if not tokens:
        raise InputError("nothing to prefill: the text has no tokens")
    if start < 0:
        raise InputError(f"start must be >= 0, got {start}")
    require_fits(engine, start + len(tokens))
    return tokens


def append_tokens(engine, tokens) -> list[int]:
    """``tokens`` as a list, checked to fit after the ``engine.n_past`` cells the context holds."""
    tokens = list(tokens)
    if not tokens:
        raise InputError("nothing to decode: the token list is empty")
    require_fits(engine, engine.n_past + len(tokens), "context plus query")
    return tokens


def capture_tokens(engine, source) -> list[int]:
    """The tokens a capture of ``source`` (text or token ids) prefills, checked to leave room
    for one query token in ``engine.n_ctx``."""
    tokens = engine.tokenize(source) if isinstance(source, str) else [int(t) for t in source]
    if not tokens:
        raise InputError("cannot capture an empty text")
    require_fits(engine, len(tokens) + 1, "text plus one query token")
    return tokens


def graft_tokens(engine, state: KVState, query, keep: Optional[int]) -> tuple[list[int], int]:
    """``(query tokens, cells kept)`` of a graft of ``state``, checked before anything is restored:
    a non-empty query, ``keep`` within ``1..N`` (default N) and room for both in ``engine.n_ctx``."""
    tokens = engine.tokenize(query, add_bos=False) if isinstance(query, str) else list(query)
    if not tokens:
        raise InputError("the query has no tokens")
    keep = state.n_tokens if keep is None else keep
    if not 0 < keep <= state.n_tokens:
        raise InputError(f"keep must be within 1..{state.n_tokens}, got {keep}")
    require_fits(engine, keep + len(tokens), "block plus query")
    return tokens, keep
