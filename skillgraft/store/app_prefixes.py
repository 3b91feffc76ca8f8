"""App prefixes in the catalog: their migration and reads and writes; a mixin of ``BlockStore``.

An app prefix is an app's own system prompt, stored by name so that skills can be warmed
behind it (``skills warm NAME --app APP``) as its chats will use them. Names and texts are
checked by :mod:`skillgraft.memory.app_prefixes`; this module only stores them.
"""

from __future__ import annotations

from sqlite_utils import Database

from ..errors import AppNotFoundError, AppTakenError, StoreError
from .catalog import migration, utc_now
from .protocols import Catalog

__all__ = ["AppPrefixes"]


@migration
def m021_create_app_prefixes(db: Database) -> None:
    """Apps' system prompts by name, the prefixes skills are warmed behind (``apps add``)."""
    db.execute("CREATE TABLE app_prefixes (name TEXT PRIMARY KEY, system TEXT NOT NULL, created_at TEXT NOT NULL)")


class AppPrefixes:
    """``app_prefix_rows``, ``app_prefix_row``, ``put_app_prefix`` and ``delete_app_prefix``;
    mixed into ``BlockStore``."""

    catalog: Catalog

    def app_prefix_rows(self) -> list[dict]:
        """Every app prefix (``name``, ``system``, ``created_at``), by name."""
        return self._app_rows("SELECT name, system, created_at FROM app_prefixes ORDER BY name")

    def app_prefix_row(self, name: str) -> dict:
        """App ``name``'s row; :class:`AppNotFoundError` if none."""
        rows = self._app_rows("SELECT name, system, created_at FROM app_prefixes WHERE name = ?", [name])
        if not rows:
            raise AppNotFoundError(name)
        return rows[0]

    def _app_rows(self, sql: str, params: list = ()) -> list[dict]:
        try:
            return self._select(sql, params)
        except StoreError:
            if self.read_only:  # a catalog older than the apps, opened read-only: none
                return []
            raise

    def put_app_prefix(self, name: str, system: str, *, replace: bool = False) -> bool:
        """Store app ``name``'s system prompt; whether it replaced one (refused with
        :class:`AppTakenError` unless ``replace``)."""
        self._require_writable(f"store app {name!r}")
        with self.catalog.write() as conn:
            held = conn.execute("SELECT 1 FROM app_prefixes WHERE name = ?", (name,)).fetchone() is not None
            if held and not replace:
                raise AppTakenError(name)
            if held:
                conn.execute("DELETE FROM app_prefixes WHERE name = ?", (name,))
            conn.execute("INSERT INTO app_prefixes (name, system, created_at) VALUES (?, ?, ?)",
                         (name, system, utc_now()))
        return held

    def delete_app_prefix(self, name: str) -> None:
        """Remove app ``name``; :class:`AppNotFoundError` if none."""
        self._require_writable(f"remove app {name!r}")
        with self.catalog.write() as conn:
            if conn.execute("SELECT 1 FROM app_prefixes WHERE name = ?", (name,)).fetchone() is None:
                raise AppNotFoundError(name)
            conn.execute("DELETE FROM app_prefixes WHERE name = ?", (name,))
