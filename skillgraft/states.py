"""Value records shared by engines and the store: no llama.cpp, no torch."""

from __future__ import annotations

from dataclasses import dataclass, field

from .fingerprint import RuntimeFingerprint


@dataclass(frozen=True)
class KVState:
    """A captured KV state of seq 0 over ``tokens`` at positions ``[0, N)``."""

    tokens: tuple[int, ...]
    payload: bytes = field(repr=False)
    sha256: str
    fingerprint: RuntimeFingerprint
    capture_s: float = 0.0

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def n_bytes(self) -> int:
        return len(self.payload)


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
