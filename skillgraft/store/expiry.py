"""Expiries in the catalog: their migration, reads and writes; a mixin of ``BlockStore``.

A block (a manual or a verified solution) records its expiry in ``blocks.expires_at``, an
imported skill in ``skills.expires_at`` (catalog migration 19): a stamp of
:func:`~skillgraft.core.expiry.expiry_stamp`, or NULL for none. Either write bumps the catalog
version, so a router rebuilds which entries may expire; whether one has passed is decided at
route time (:mod:`skillgraft.core.expiry`). Nothing here deletes what expired.
"""

from __future__ import annotations

from typing import Iterable, Optional

from sqlite_utils import Database

from ..core.blocks import Block
from ..core.expiry import Deadlines
from ..errors import StoreError
from .catalog import migration
from .protocols import Catalog

__all__ = ["Expiries"]

_BUMP = "UPDATE catalog_state SET version = version + 1 WHERE id = 1"


@migration
def m019_record_expiry(db: Database) -> None:
    """Blocks and imported skills may carry an expiry (hidden after it, kept until removed)."""
    db.execute("ALTER TABLE blocks ADD COLUMN expires_at TEXT")
    db.execute("ALTER TABLE skills ADD COLUMN expires_at TEXT")


class Expiries:
    """``skill_expiries``, ``deadlines``, ``set_block_expiry`` and ``set_skill_expiry``; mixed into ``BlockStore``."""

    catalog: Catalog

    def skill_expiries(self) -> dict[str, str]:
        """``{name: stamp}`` of the imported skills that carry an expiry."""
        try:
            rows = self._select("SELECT name, expires_at FROM skills WHERE expires_at IS NOT NULL")
        except StoreError:
            if self.read_only:  # a catalog older than expiries, opened read-only: none
                return {}
            raise
        return {row["name"]: row["expires_at"] for row in rows}

    def deadlines(self, blocks: Iterable[Block]) -> Deadlines:
        """The expiries of ``blocks`` (by id) and of every imported skill (by name)."""
        return Deadlines({**{block.id: block.expires_at for block in blocks}, **self.skill_expiries()})

    def set_block_expiry(self, block: Block, stamp: Optional[str]) -> Block:
        """Give ``block`` the expiry ``stamp`` (None: none); the block as stored now."""
        self._require_writable(f"change the expiry of block {block.id}")
        with self.catalog.write() as conn:
            conn.execute("UPDATE blocks SET expires_at = ? WHERE id = ?", (stamp, block.id))
        return self._by_id(block.id)

    def set_skill_expiry(self, name: str, stamp: Optional[str]) -> None:
        """Give imported skill ``name`` the expiry ``stamp`` (None: none)."""
        self.skill_default(name)  # SkillNotFoundError
        self._require_writable(f"change the expiry of skill {name!r}")
        with self.catalog.write() as conn:
            conn.execute("UPDATE skills SET expires_at = ? WHERE name = ?", (stamp, name))
            conn.execute(_BUMP)
