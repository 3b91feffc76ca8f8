"""Prefix reuse: a prompt continues what a context already holds, or a derived prefix state,
instead of being prefilled again.

A request's prompt (a block's kept cells, then the chat after them; or the chat alone) is
compared with three things that may already hold its beginning:

- ``slot``: the cells the context (an in-process context, a llama-server slot) holds from its
  last request — the same block, the same app system turns and tools, the same earlier turns;
- ``derived``: a *derived state*, the state after a prefix two earlier requests shared
  (:class:`~skillgraft.kv.prefix_cache.PrefixCache`), kept in a bounded cache that outlives the process;
- ``block``: the routed block's own verified state.

:func:`choose_reuse` takes the longest; every cell kept is exact (a cell depends only on the
tokens before it), and at least the last prompt token is always evaluated, for its logits.

A derived state is captured where two prompts part ways — the prefix recurs with another
continuation (an agent's system prompt and tools before each new question) — never where one
prompt merely extends the other (a conversation's next turn: the slot holds that already).
Prompts behind different blocks (or behind none) are compared after their blocks: an app's
system turns and tools recur behind every skill it is routed to, so the first request of the
app behind a skill already keeps that skill's derived state (block + the app's prefix).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from ..core.states import KVState

# Shorter shared prefixes are not worth a state file (a few hundred KB of KV for a few ms).
MIN_DERIVED_TOKENS = 64
# At least this many prompt tokens are evaluated after reused cells: a batch of fewer tokens
# takes another matrix kernel on some CPUs and gives other bits (measured on Gemma 3: batches
# of 1 to 6 tokens differ from the same tokens in a large batch, 8 and more are equal).
MIN_TAIL = 8
RECENT_PROMPTS = 32
# At most this many tokens open a chat before the app's own text (BOS and a turn marker).
CHAT_OPENING = 8
SOURCES = ("slot", "derived", "block")


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    left, right = np.asarray(a[:n], dtype=np.int64), np.asarray(b[:n], dtype=np.int64)
    differ = np.flatnonzero(left != right)
    return int(differ[0]) if differ.size else n


@dataclass(frozen=True)
class Reuse:
    """What a prompt reuses: ``cells`` from ``source`` (``""``: nothing, prefill it all);
    ``state`` to restore first (a derived state or the block's), None to continue what the
    context holds; ``capture_at`` > 0 asks for a derived state after that many tokens."""

    source: str
    cells: int
    state: Optional[KVState] = None
    capture_at: int = 0


def choose_reuse(prompt: Sequence[int], *, held: Optional[Sequence[int]] = None,
                 block: Optional[tuple[KVState, int]] = None, derived: Optional[KVState] = None,
                 capture_at: int = 0, held_at_most: Optional[Sequence[int]] = None) -> Reuse:
    """The longest reuse for ``prompt``: the context's ``held`` tokens (None: unknown), a
    ``derived`` state whose tokens begin the prompt, or ``block`` (its state and the cells
    kept). Ties go to what needs no restore, then to the derived state.

    What the context held or a derived state leaves at least :data:`MIN_TAIL` tokens to
    evaluate (the block, as the graft without reuse, only the last). A context that cannot
    keep fewer cells than it holds (a llama-server slot keeps the longest common prefix) says
    what it may hold at most (``held_at_most``): it is reused only when even that leaves the
    tail. ``capture_at`` is kept when no derived state that long is at hand: the caller saves
    the prefix once the answer is made."""
    whole = len(prompt) - 1  # the last prompt token is evaluated for its logits
    limit = len(prompt) - MIN_TAIL
    options: list[Reuse] = []
    if held is not None:
        cells = min(common_prefix(held, prompt), whole)
        most = cells if held_at_most is None else min(common_prefix(held_at_most, prompt), whole)
        if most <= limit:
            options.append(Reuse("slot", cells))
        elif held_at_most is None:
            options.append(Reuse("slot", max(limit, 0)))
    if derived is not None and derived.n_tokens <= limit and common_prefix(derived.tokens, prompt) == derived.n_tokens:
        options.append(Reuse("derived", derived.n_tokens, derived))
    if block is not None:
        state, keep = block
        options.append(Reuse("block", min(keep, whole), state))
    best = max(options, key=lambda r: (r.cells, -SOURCES.index(r.source)), default=Reuse("", 0))
    if best.cells == 0:
        best = Reuse("", 0)
    captured = derived.n_tokens if derived is not None else 0
    # A state only a few tokens longer than one at hand (two questions sharing a first word) is
    # not worth its file: the one at hand serves, cut to what it shares.
    if captured + MIN_DERIVED_TOKENS <= capture_at < len(prompt):
        return Reuse(best.source, best.cells, best.state, capture_at)
    return best


def app_starts(after: int) -> Sequence[int]:
    """Where the app's part of a prompt may begin: after its block, or (no block) within the
    first :data:`CHAT_OPENING` tokens — a block carries the BOS and the opening of its chat
    turn (Gemma's template opens the user turn the app's system text is folded into)."""
    return (after,) if after else range(CHAT_OPENING + 1)


def shared_after_heads(earlier: Sequence[int], earlier_after: int, prompt: Sequence[int], after: int) -> tuple[int, int]:
    """How far ``prompt`` goes with ``earlier`` when their heads (blocks) differ: the cells of
    ``prompt`` up to where their app parts part ways (0 when they do not), and where its app
    part begins. A prompt that ends inside the other's app part does not part ways with it."""
    best = (0, after)
    for mine in app_starts(after):
        for theirs in app_starts(earlier_after):
            tail = common_prefix(earlier[theirs:], prompt[mine:])
            if tail < len(earlier) - theirs and mine + tail < len(prompt) and mine + tail > best[0]:
                best = (mine + tail, mine)
    return best
