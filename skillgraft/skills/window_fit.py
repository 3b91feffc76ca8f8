"""What fits the context window: the one policy every caller asks (deposits, skill imports,
bundles, the CLI's manual split).

A block captured ahead (a manual or a solution) leaves :data:`QUERY_ROOM_TOKENS` of the window
free for the questions asked behind it (:func:`block_room`, :func:`block_overflow`). An imported
skill's part is stored as text, measured in characters since an import runs no model: at most a
quarter of the window at :data:`CHARS_PER_TOKEN`, and at most :data:`PART_CHARS`
(:func:`part_chars`), so it fits beside an agent's own prompt (the pipeline still checks that
it fits before it places it).
"""

from __future__ import annotations

from typing import Optional

__all__ = ["CHARS_PER_TOKEN", "PART_CHARS", "QUERY_ROOM_TOKENS", "block_overflow", "block_room", "part_chars"]

QUERY_ROOM_TOKENS = 256
PART_CHARS = 4000
CHARS_PER_TOKEN = 4


def block_room(n_ctx: int) -> int:
    """The most tokens a block captured ahead may hold under an ``n_ctx``-token window."""
    return n_ctx - QUERY_ROOM_TOKENS


def block_overflow(n_tokens: int, n_ctx: int) -> Optional[str]:
    """Why a block of ``n_tokens`` does not fit an ``n_ctx``-token window (None: it fits)."""
    if n_tokens <= block_room(n_ctx):
        return None
    return f"its {n_tokens} tokens leave too little of this runtime's context ({n_ctx}) for questions"


def part_chars(n_ctx: int) -> int:
    """The most characters a skill's part holds under an ``n_ctx``-token window."""
    return min(PART_CHARS, n_ctx * CHARS_PER_TOKEN // 4)
