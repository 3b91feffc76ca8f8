"""One budget for the derived states of several stores: a gateway's base and namespaces.

Each namespace keeps its derived states in a folder of its own
(:class:`~skillgraft.store.derived_states.DerivedStates`). Given a :class:`SharedBytes` as its
``max_bytes``, a folder joins that budget: the folders together hold at most its bytes on disk
and its ``memory_bytes`` in memory, and each folder alone at most as much. Within the bound a
folder may use what the others leave; past it, the states evicted are those of the folder
furthest over its fair share (the bound over the folders that hold states), oldest use first,
so one namespace's flood of prompts never evicts the states of a namespace within its share.
States behind pinned blocks are never evicted (they may take the total past the bound).
"""

from __future__ import annotations

import threading
import weakref
from typing import Optional

__all__ = ["DEFAULT_DERIVED_BYTES", "DEFAULT_MEMORY_BYTES", "BudgetMember", "SharedBytes", "shared_bytes"]

DEFAULT_DERIVED_BYTES = 2 << 30  # a home's derived states on disk (--derived-mib 2048)
DEFAULT_MEMORY_BYTES = 256 << 20  # those held in memory besides


class SharedBytes(int):
    """A byte count (an ``int``) that several derived-state folders share as one bound, with
    ``memory_bytes`` the bound of the states they hold in memory."""

    memory_bytes: int

    def __new__(cls, max_bytes: int, memory_bytes: Optional[int] = None) -> "SharedBytes":
        made = super().__new__(cls, max_bytes)
        made.memory_bytes = DEFAULT_MEMORY_BYTES if memory_bytes is None else memory_bytes
        made._members = weakref.WeakSet()
        made._lock = threading.Lock()
        return made

    def join(self, member: "BudgetMember") -> None:
        """``member`` shares the bound from now on (what it holds is settled at once)."""
        self._members.add(member)
        self.settle()

    def usage(self) -> tuple[int, int]:
        """The bytes the members hold: on disk, and in memory."""
        members = list(self._members)
        return sum(m.n_bytes for m in members), sum(m.memory_n_bytes for m in members)

    def settle(self) -> None:
        """Evict, fairly, until the members hold the bound (on disk, then in memory)."""
        with self._lock:
            members = list(self._members)
            self._settle(members, lambda m: m.n_bytes, int(self), lambda m: m.evict_oldest())
            self._settle(members, lambda m: m.memory_n_bytes, self.memory_bytes, lambda m: m.drop_oldest_memory())

    @staticmethod
    def _settle(members: list, size, bound: int, evict) -> None:
        while True:
            sizes = {member: size(member) for member in members}
            holding = [member for member in members if sizes[member]]
            if sum(sizes.values()) <= bound or not holding:
                return
            share = bound // len(holding)
            over = sorted((m for m in holding if sizes[m] > share), key=lambda m: sizes[m] - share, reverse=True)
            if not any(evict(member) for member in over):  # only those over their share give way
                return


def shared_bytes(max_bytes: Optional[int], memory_bytes: Optional[int] = None) -> SharedBytes:
    """``max_bytes`` as a :class:`SharedBytes` (None: the default bound of derived states); one
    given already is itself."""
    if isinstance(max_bytes, SharedBytes):
        return max_bytes
    return SharedBytes(DEFAULT_DERIVED_BYTES if max_bytes is None else max_bytes, memory_bytes)


class BudgetMember:
    """What a shared budget asks of a :class:`~skillgraft.store.derived_states.DerivedStates`."""

    @property
    def memory_n_bytes(self) -> int:
        with self._lock:
            return sum(state.n_bytes for state in self._memory.values())

    def evict_oldest(self) -> bool:
        """Delete the least recently used state not behind a pinned block; False when none is."""
        with self._lock:
            key = next((k for k, (_, _, record) in self._files.items() if record.parent not in self._pinned), None)
            if key is None:
                return False
            del self._files[key]
            self._memory.pop(key, None)
            self._changes += 1
        self._delete([key])
        return True

    def drop_oldest_memory(self) -> bool:
        """Drop the least recently used state held in memory (its file stays); False when none is."""
        with self._lock:
            if not self._memory:
                return False
            self._memory.popitem(last=False)
            return True
