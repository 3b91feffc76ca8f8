"""The KV cache behind imported skills: which skills have states kept and their bytes, the
budget they share with every other derived state, and pins.

A skill's states are the derived prefix states whose parent is one of its blocks (a text
part's state captured on first use or by ``skills warm``, the state after a part and an app's
prefix). A *pinned* skill's states are never evicted by the LRU budget
(:class:`~skillgraft.store.derived_states.DerivedStates`); they count against it, so a pin that
would take the pinned states past the budget is refused (:class:`PinBudgetError`). Pins are
kept in the catalog and outlive the process. Eviction only ever deletes a state file: a
skill's text is its catalog row and stays. ``memory.skills`` pins and reports
(:meth:`~.component.Skills.pin`, :meth:`~.component.Skills.cache`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Optional

from ..errors import PinBudgetError
from ..store.derived_states import DERIVED_FOLDER, StateUse, derived_usage

__all__ = ["CacheReport", "SkillCacheRow", "cache_report", "check_pin", "sync_pins"]


@dataclass(frozen=True)
class SkillCacheRow:
    """One imported skill in the cache: how many ``states`` it has kept, their ``n_bytes``,
    and whether it is ``pinned``."""

    name: str
    states: int
    n_bytes: int
    pinned: bool


@dataclass
class CacheReport:
    """The derived-state cache: its ``budget`` (bytes each runtime's states may take), the
    bytes ``used`` (every runtime), of them ``pinned_bytes``, each skill's row, and the states
    behind no skill (``other_states``, ``other_bytes``: an app's prefix alone, a plain manual)."""

    budget: int
    used: int = 0
    pinned_bytes: int = 0
    skills: list = field(default_factory=list)
    other_states: int = 0
    other_bytes: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def cache_report(store, budget: int) -> CacheReport:
    """What the derived-state folders under ``store``'s home hold, by skill (read only: no
    model, no state opened)."""
    uses = derived_usage(store.home / DERIVED_FOLDER)
    owners, _ = store.skill_routing()
    pinned, pinned_blocks = set(store.pinned_skills()), store.pinned_blocks()
    report = CacheReport(budget, used=sum(use.n_bytes for use in uses),
                         pinned_bytes=sum(use.n_bytes for use in uses if use.parent in pinned_blocks))
    counts: dict[str, list[int]] = {name: [0, 0] for name in store.skill_names()}
    for use in uses:
        owner = owners.get(use.parent) if use.parent else None
        if owner in counts:
            counts[owner][0] += 1
            counts[owner][1] += use.n_bytes
        else:
            report.other_states += 1
            report.other_bytes += use.n_bytes
    report.skills = [SkillCacheRow(name, n, size, name in pinned) for name, (n, size) in counts.items()]
    return report


def pinned_by_runtime(uses: list[StateUse], blocks: frozenset) -> dict[str, int]:
    """The bytes of the states behind ``blocks`` in each runtime's folder."""
    totals: dict[str, int] = {}
    for use in uses:
        if use.parent in blocks:
            totals[use.runtime] = totals.get(use.runtime, 0) + use.n_bytes
    return totals


def check_pin(store, name: str, budget: int) -> None:
    """:class:`PinBudgetError` when pinning skill ``name`` would take the pinned states of a
    runtime past ``budget`` bytes."""
    parts = store.skill_parts(name, store.skill_default(name))
    blocks = store.pinned_blocks() | {part["block_id"] for part in parts}
    over = {runtime: size for runtime, size in pinned_by_runtime(
        derived_usage(store.home / DERIVED_FOLDER), blocks).items() if size > budget}
    if over:
        raise PinBudgetError(name, max(over.values()), budget)


def sync_pins(memory) -> None:
    """Tell ``memory``'s open cache which blocks are pinned now (a default version changed, a pin)."""
    prefixes: Optional[object] = memory.states.opened
    pin = getattr(getattr(prefixes, "store", None), "pin", None)
    if pin is not None:
        pin(memory.store.pinned_blocks())
