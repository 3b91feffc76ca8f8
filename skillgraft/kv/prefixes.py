"""Prefix reuse: a prompt continues what a context already holds, or a stored prefix state,
instead of being prefilled again — and those states found by key.

A request's prompt (a block's kept cells, then the chat after them; or the chat alone) is
compared with three things that may already hold its beginning:

- ``slot``: the cells the context (an in-process context, a llama-server slot) holds from its
  last request — the same block, the same app system turns and tools, the same earlier turns;
- ``derived``: a *derived state*, the state after a prefix two earlier requests shared
  (:class:`PrefixCache`), kept in a bounded cache that outlives the process;
- ``block``: the routed block's own verified state.

A captured block is also found by key, as a derived state is (see below), so a prompt that
begins with a block's tokens reuses its cells with no routing.

:func:`choose_reuse` takes the longest; every cell kept is exact (a cell depends only on the
tokens before it), and at least the last prompt token is always evaluated, for its logits.

A derived state is captured where two prompts part ways — the prefix recurs with another
continuation (an agent's system prompt and tools before each new question) — never where one
prompt merely extends the other (a conversation's next turn: the slot holds that already).
Prompts behind different blocks (or behind none) are compared after their blocks: an app's
system turns and tools recur behind every skill it is routed to, so the first request of the
app behind a skill already keeps that skill's derived state (block + the app's prefix).

**Found by key.** Every KV state is the prefix state of a token sequence under a runtime. Its
tokens are cut into blocks of :data:`BLOCK_TOKENS`; block ``i``'s key hashes block ``i-1``'s key
with the block's token ids, and the chain starts from the runtime's fingerprint id. Two
sequences share their first ``k`` blocks exactly when their ``k``-th keys are equal, so the
longest stored prefix of a prompt is found with a few key lookups (a binary search over the
prompt's own keys: a state that shares ``k`` blocks shares every fewer; :class:`PrefixIndex`),
never by comparing the prompt with every state. The same keys address states in memory, on
disk and in a shared store (:func:`state_key`); a store that learns of states only when asked
for them (a shared store's published states) is asked for the prompt's deeper keys when its
states at hand do not serve the prompt to the end (:meth:`DerivedStore.find`).

**Blocks by key.** A captured block's state is the prefix state of its tokens at position 0, so
the live blocks of the runtime (:class:`KeptBlocks`: not quarantined, not expired) are indexed
beside the derived states, read-only: a prompt opening with a block's exact tokens (a chat whose
first system turn is a manual's text) restores the block's cells, found by key and cut like a
derived state, with no routing. Blocks are keyed in :data:`BLOCK_SCOPE`, which every scope of the
cache searches besides its own: whoever can send a prompt to a memory can already route to its
blocks (its own store's and the base's), and no prompt or derived state is ever keyed there. A
prompt led by a restored (routed) block does not look for blocks: its block gives those cells.

**Scoped.** Reuse is shared only within a *scope* (:func:`reuse_scope`: a namespace, and a
salt a client may add): the chain starts from the runtime and the scope, so a state kept in one
scope is never found from another, and the prompts compared for capture points are the scope's
own. Otherwise a client could learn another's prompt from what is reused (how many cells, and
how soon the first token comes).
"""

from __future__ import annotations

import copy
import logging
import threading
from collections import deque
from dataclasses import dataclass
from typing import Callable, Hashable, Optional, Protocol, Sequence

import numpy as np

from ..core.states import KVState
from ..errors import BlockIntegrityError, ConfigError
from .prefix_keys import BLOCK_SCOPE, BLOCK_TOKENS, SCOPE_HEX, PrefixIndex, chain_keys, common_prefix, reuse_scope
from .prefix_keys import state_key

__all__ = [
    "BLOCK_SCOPE", "BLOCK_TOKENS", "MIN_DERIVED_TOKENS", "MIN_TAIL", "SCOPE_HEX", "DerivedStore", "KeptBlocks",
    "PrefixCache", "PrefixIndex", "Reuse", "chain_keys", "choose_reuse", "common_prefix", "reuse_scope", "state_key",
]

logger = logging.getLogger("skillgraft.kv")

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
    evaluate (the block, as the graft without reuse, only the last). A context that keeps the
    longest common prefix of what it holds (a llama-server slot) says what it may hold at most
    (``held_at_most``); where even that leaves the tail, it is reused as it is, else the first
    cells it surely holds, up to the tail, are reused and the backend first cuts its cells to
    them (:meth:`~skillgraft.server.slot.SlotBackend.evaluate`: the same prompt sent again).
    ``capture_at`` is kept when no derived state that long is at hand: the caller saves the
    prefix once the answer is made."""
    whole = len(prompt) - 1  # the last prompt token is evaluated for its logits
    limit = len(prompt) - MIN_TAIL
    options: list[Reuse] = []
    if held is not None:
        cells = min(common_prefix(held, prompt), whole)
        most = cells if held_at_most is None else min(common_prefix(held_at_most, prompt), whole)
        if most <= limit:
            options.append(Reuse("slot", cells))
        elif min(cells, limit) > 0:
            options.append(Reuse("slot", min(cells, limit)))
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


# -- derived states ----------------------------------------------------------------

class DerivedStore(Protocol):
    """Where derived states are kept (:class:`~skillgraft.store.derived_states.DerivedStates`).
    A store that does not list every state it can give (the shared one,
    :class:`~skillgraft.store.shared_derived.SharedDerivedStates`) also has
    ``find(keys) -> bool``: learn those holding the deepest of a prompt's chain ``keys``
    (deepest last), True when :meth:`entries` changed."""

    def entries(self) -> list[tuple[str, tuple[int, ...], str]]:
        """The key, the tokens and the scope of every state held."""
        ...

    def get(self, key: str) -> Optional[KVState]:
        """The state under ``key``, digest-checked, or None (missing, damaged or foreign: ignored)."""
        ...

    def put(self, key: str, state: KVState, parent: Optional[str] = None, scope: str = "") -> None: ...

    def forget(self, keys: list[str]) -> None:
        """Delete the states of ``keys`` (found unusable where they were read)."""
        ...

    @property
    def generation(self) -> Hashable:
        """Changes whenever the states held change (their keys, not their use order)."""
        ...


class KeptBlocks(Protocol):
    """Captured blocks as prefix states (:class:`~skillgraft.store.block_states.BlockStates`):
    read-only, each keyed in :data:`BLOCK_SCOPE`; eviction and budgets never touch them."""

    def entries(self) -> list[tuple[str, tuple[int, ...], str]]:
        """The key, the tokens and the scope (:data:`BLOCK_SCOPE`) of every live block."""
        ...

    def get(self, key: str) -> Optional[KVState]:
        """The verified state of the block under ``key``, or None (gone, damaged: ignored)."""
        ...

    def refuse(self, key: str, state: KVState, reason: BaseException) -> bool:
        """``state``, found under ``key``, was unusable where it was read: True when it is that
        block's own (then not found by key again until the catalog changes; the block stays)."""
        ...

    @property
    def generation(self) -> Hashable:
        """Changes whenever the live blocks change."""
        ...


class _Shared:
    """What every scope's view of one :class:`PrefixCache` shares."""

    def __init__(self, fingerprint_id: str, recent: int) -> None:
        self.recent: deque[tuple[np.ndarray, int, str]] = deque(maxlen=recent)
        self.lock = threading.Lock()  # slots of one gateway answer at once
        self.index = PrefixIndex(fingerprint_id)
        self.generation: Hashable = object()  # nothing indexed yet
        self.block_keys: frozenset[str] = frozenset()  # the keys the index holds of blocks


class PrefixCache:
    """Derived prefix states for one runtime, in one reuse ``scope`` (:func:`reuse_scope`;
    :meth:`scoped` gives the same cache in another): looked up for each prompt, captured where
    two recent prompts of the scope part ways (at least ``min_tokens`` shared), kept in
    ``store``. A state longer than what a prompt shares with it is cut to the shared cells
    (``cut(state, n)``, the engine's: a cell depends only on the tokens before it), so a prefix
    captured where two questions shared a first word still serves a third question. ``blocks``:
    the captured blocks found by key beside the derived states, in every scope."""

    def __init__(self, store: DerivedStore, fingerprint_id: str, cut: Callable[[KVState, int], KVState], *,
                 min_tokens: int = MIN_DERIVED_TOKENS, recent: int = RECENT_PROMPTS, scope: str = "",
                 blocks: Optional[KeptBlocks] = None) -> None:
        self.store = store
        self.blocks = blocks
        self.fingerprint_id = fingerprint_id
        self.cut = cut
        self.min_tokens = min_tokens
        self.scope = scope
        if min_tokens < BLOCK_TOKENS:
            raise ConfigError(f"a derived state spans at least one key block ({BLOCK_TOKENS} tokens), not {min_tokens}")
        self._shared = _Shared(fingerprint_id, recent)

    def scoped(self, scope: str) -> "PrefixCache":
        """This cache as seen from ``scope``: the same store and index, only that scope's states
        and prompts."""
        if scope == self.scope:
            return self
        view = copy.copy(self)
        view.scope = scope
        return view

    def lookup(self, prompt: Sequence[int], beyond: int = 0, *, blocks: bool = True) -> Optional[KVState]:
        """The derived state of this scope (or, with ``blocks``, the captured block) sharing the
        longest beginning with ``prompt`` (at least ``min_tokens`` and more than ``beyond``, the
        cells already at hand; leaving :data:`MIN_TAIL` to evaluate), cut to what they share:
        found by the chained keys of the prompt's blocks, the index kept in step with the store.
        A state that would give no more than ``beyond`` is never read nor cut."""
        limit = len(prompt) - MIN_TAIL
        at_least = max(self.min_tokens, beyond + 1)
        if limit < at_least:
            return None
        self._sync()
        keys = chain_keys(self.fingerprint_id, prompt, self.scope)
        found = self._candidates(prompt, at_least, keys, blocks)
        reached = min(found[0][0], limit) if found else 0
        find = getattr(self.store, "find", None)  # states the store learns of by key
        if find is not None and reached < limit and find(keys[reached // BLOCK_TOKENS:]):
            self._sync()
            found = self._candidates(prompt, at_least, keys, blocks)
        for shared, key in found:
            shared = min(shared, limit)
            if shared < at_least:
                continue
            source = self.blocks if key in self._shared.block_keys else self.store
            state = source.get(key) if source is not None else None  # a payload is read where it is used
            if state is None or tuple(state.tokens[:shared]) != tuple(prompt[:shared]):
                continue
            if shared == state.n_tokens:
                return state
            try:
                return self.cut(state, shared)
            except BlockIntegrityError as exc:
                self.refuse(state, exc)
        return None

    def _candidates(self, prompt: Sequence[int], at_least: int, keys: list[bytes],
                    blocks: bool = True) -> list[tuple[int, str]]:
        """``(shared tokens, key)`` of the states of this scope (``keys``: the prompt's chain keys
        in it) and, with ``blocks``, of the blocks, longest first (a derived state first at a tie)."""
        index = self._shared.index
        found = index.candidates(prompt, at_least=at_least, scope=self.scope, keys=keys)
        if blocks and self._shared.block_keys:
            found += index.candidates(prompt, at_least=at_least, scope=BLOCK_SCOPE)
            found.sort(key=lambda item: -item[0])
        return found

    def refuse(self, state: KVState, reason: BaseException) -> None:
        """``state``, as the store gave it, turned out unusable where its payload was read (a
        file swapped since it was found): deleted, with a log line; its prompt is prefilled. A
        block's own state is never deleted here: the block's store settles it."""
        if self.blocks is not None:
            key = state_key(self.fingerprint_id, state.tokens, BLOCK_SCOPE)
            if key in self._shared.block_keys and self.blocks.refuse(key, state, reason):
                return
        key = state_key(self.fingerprint_id, state.tokens, self.scope)
        logger.warning("derived state %s is damaged or not what the index recorded (%s): deleted, its prompt is "
                       "prefilled", key[:12], reason)
        self.store.forget([key])

    def _sync(self) -> None:
        """Index the store's states (and the blocks) again when they changed since the last look."""
        generation = (getattr(self.store, "generation", None),  # None: a store that cannot tell
                      None if self.blocks is None else self.blocks.generation)
        shared = self._shared
        with shared.lock:
            if generation[0] is not None and generation == shared.generation:
                return
            shared.generation = generation
        entries = [entry for entry in self.store.entries() if entry[2] != BLOCK_SCOPE]
        blocks = [] if self.blocks is None else [entry for entry in self.blocks.entries() if entry[2] == BLOCK_SCOPE]
        shared.block_keys = frozenset(key for key, _, _ in blocks)
        shared.index.sync(entries + blocks)

    def capture_point(self, prompt: Sequence[int], after: int = 0) -> int:
        """Where a derived state of ``prompt`` should be captured (0: nowhere): the longest
        prefix it shares with a recent prompt of this scope that went on differently. ``after``
        is how many leading cells are a block's: a prompt behind another block (or none) is
        compared from where its own block ends, and the state is captured at this block plus
        what they share."""
        best = 0
        with self._shared.lock:
            recent = [(earlier, earlier_after) for earlier, earlier_after, scope in self._shared.recent
                      if scope == self.scope]
        prompt = np.asarray(prompt, dtype=np.int64)  # compared with every recent prompt: converted once
        for earlier, earlier_after in recent:
            same_head = earlier_after == after and common_prefix(earlier[:after], prompt[:after]) == after
            if not same_head:  # another block in front: compare what follows the blocks
                shared, start = shared_after_heads(earlier, earlier_after, prompt, after)
            else:
                shared, start = common_prefix(earlier, prompt), after
                if shared >= min(len(earlier), len(prompt)):  # one extends the other: nothing parts ways
                    continue
            if shared - start >= self.min_tokens and shared > best:
                best = shared
        return best

    def remember(self, prompt: Sequence[int], after: int = 0) -> None:
        """Note ``prompt`` (its first ``after`` cells a block's) for later capture points in this
        scope (the same prompt again is noted once)."""
        tokens = np.asarray(prompt, dtype=np.int64)
        with self._shared.lock:
            recent = self._shared.recent
            for index, (earlier, earlier_after, scope) in enumerate(recent):
                if (scope == self.scope and earlier_after == after and len(earlier) == len(tokens)
                        and np.array_equal(earlier, tokens)):
                    del recent[index]
                    break
            recent.append((tokens, after, self.scope))

    def kept_length(self, prompt: Sequence[int]) -> int:
        """The most leading tokens of ``prompt`` a kept state of this scope, or a block, holds
        (its index only: nothing is read)."""
        self._sync()
        found = self._candidates(prompt, self.min_tokens, chain_keys(self.fingerprint_id, prompt, self.scope))
        return min(found[0][0], len(prompt)) if found else 0

    def holds(self, prefix: Sequence[int]) -> bool:
        """Whether the state of exactly ``prefix`` is kept in this scope (nothing is read)."""
        key = state_key(self.fingerprint_id, prefix, self.scope)
        return any(entry[0] == key for entry in self.store.entries())

    def keep(self, state: KVState, parent: Optional[str] = None) -> None:
        """Store a captured derived state under its content address in this scope."""
        self.store.put(state_key(self.fingerprint_id, state.tokens, self.scope), state, parent, self.scope)
