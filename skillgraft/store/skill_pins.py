"""Pinned skills in the catalog: their migration and reads and writes; a mixin of ``BlockStore``.

A pinned skill's KV states (the derived states kept behind the blocks of its default version)
are never evicted from a host's derived-state cache (:mod:`skillgraft.store.derived_states`).
A skill's removal removes its pin (:meth:`SkillRecords.remove_skill_version`).
"""

from __future__ import annotations

from sqlite_utils import Database

from ..errors import StoreError
from .catalog import migration, utc_now
from .protocols import Catalog

__all__ = ["SkillPins"]


@migration
def m018_create_skill_pins(db: Database) -> None:
    """Skills whose KV states the derived-state cache never evicts (``skills pin``)."""
    db.execute("CREATE TABLE skill_pins (name TEXT PRIMARY KEY, pinned_at TEXT NOT NULL)")


class SkillPins:
    """``pinned_skills``, ``pinned_blocks`` and ``set_skill_pin``; mixed into ``BlockStore``."""

    catalog: Catalog

    def pinned_skills(self) -> list[str]:
        """The names of the pinned skills, by name."""
        return [row["name"] for row in self._pin_rows("SELECT name FROM skill_pins ORDER BY name")]

    def pinned_blocks(self) -> frozenset:
        """The blocks of every pinned skill's default version: the parents of the derived
        states the cache keeps whatever its budget."""
        rows = self._pin_rows(
            "SELECT b.block_id FROM skill_pins p JOIN skills s ON s.name = p.name"
            " JOIN skill_blocks b ON b.name = s.name AND b.version = s.default_version"
        )
        return frozenset(row["block_id"] for row in rows)

    def _pin_rows(self, sql: str) -> list[dict]:
        try:
            return self._select(sql)
        except StoreError:
            if self.read_only:  # a catalog older than the pins, opened read-only: none
                return []
            raise

    def set_skill_pin(self, name: str, pinned: bool) -> bool:
        """Pin skill ``name`` (or unpin it); whether that changed anything."""
        self.skill_default(name)  # SkillNotFoundError
        self._require_writable(f"{'pin' if pinned else 'unpin'} skill {name!r}")
        with self.catalog.write() as conn:
            held = conn.execute("SELECT 1 FROM skill_pins WHERE name = ?", (name,)).fetchone() is not None
            if pinned and not held:
                conn.execute("INSERT INTO skill_pins (name, pinned_at) VALUES (?, ?)", (name, utc_now()))
            elif held and not pinned:
                conn.execute("DELETE FROM skill_pins WHERE name = ?", (name,))
        return held != pinned
