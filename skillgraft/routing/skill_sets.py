"""The routed set: the few skills that go with the routed one, each kept on its own evidence.

A question often needs more than one skill (two functions to call, a manual and its neighbour);
the router's best block alone misses the second, and among near-namesakes it may pick the wrong
one. A routed set adds to the best block the next candidates that stand on their own: each
scores at least the abstain threshold, within :data:`DEFAULT_SET_MARGIN` of the best, is not
vetoed by a near miss or a generic request, and is another skill's; at most ``size`` in all
(the store's setting :data:`SET_SIZE_SETTING`, 1 by default: the best block alone). The set is
placed after the app's prefix in one canonical order (:func:`~skillgraft.core.placement.skill_places`),
so the same set always gives the same tokens and its prefix state is found again by key.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping, Optional, Sequence

from ..errors import InputError

if TYPE_CHECKING:
    from ..core.blocks import Block
    from .ranking import Ranking

__all__ = ["DEFAULT_SET_MARGIN", "MAX_SET_SIZE", "SET_MARGIN_SETTING", "SET_SIZE_SETTING", "companions", "set_rule"]

SET_SIZE_SETTING = "router.set_size"
SET_MARGIN_SETTING = "router.set_margin"
MAX_SET_SIZE = 8  # as many skills as the largest agent APIs take in one request
# Chosen before measuring: a companion this near the best is as likely the one a question needs
# (near-namesakes, the second of two functions); docs/routing.md gives what it covers.
DEFAULT_SET_MARGIN = 0.08


def set_rule(setting: Callable[[str], Optional[str]]) -> tuple[int, float]:
    """``(size, margin)`` from a store's settings (``setting(key)``): the defaults where unset;
    :class:`InputError` for a value out of range (a size from 1 to :data:`MAX_SET_SIZE`, a
    margin from 0 to 1)."""
    size_text, margin_text = setting(SET_SIZE_SETTING), setting(SET_MARGIN_SETTING)
    try:
        size = int(size_text) if size_text is not None else 1
        margin = float(margin_text) if margin_text is not None else DEFAULT_SET_MARGIN
    except ValueError as exc:
        raise InputError(f"the routed set's settings must be numbers: {exc}") from exc
    if not 1 <= size <= MAX_SET_SIZE or not 0.0 <= margin <= 1.0:
        raise InputError(f"a routed set takes 1 to {MAX_SET_SIZE} skills within a margin from 0 to 1, "
                         f"got {size} and {margin}")
    return size, margin


def companions(ranked: Sequence[tuple[str, float]], blocks: Mapping[str, "Block"], ranking: "Ranking",
               threshold: float, size: int, margin: float) -> tuple["Block", ...]:
    """The blocks that go with ``ranked``'s best (its first entry, grafted) in a set of at most
    ``size``: each at or above ``threshold``, within ``margin`` of the best, not vetoed, and
    another skill's (``ranked`` holds one entry per skill)."""
    if size <= 1 or len(ranked) < 2:
        return ()
    best = ranked[0][1]
    found = []
    for block_id, score in ranked[1:]:
        if len(found) >= size - 1 or score < threshold or score < best - margin:
            break
        if not ranking.vetoed(block_id):
            found.append(blocks[block_id])
    return tuple(found)
