"""The catalog's records of imported Agent Skills, above their blocks; a mixin of ``BlockStore``.

A skill has versions (one the default); a version records its folder, description, a JSON
record (frontmatter, scripts, assets, warnings), its files (manifest rows, for export) and its
parts: the blocks it is made of (a block whose text did not change is shared by the versions
holding it). Every write runs in one catalog transaction and bumps the catalog version, so a
router rebuilds which blocks it may route to.

A file's bytes are stored once per catalog (a namespace's store), addressed by their SHA-256,
computed here from the bytes: one row of the files with that SHA-256 holds them and the others
hold none (``data`` NULL) and read them from it, checked against the address on every read.
Removing the row that holds them hands them to another row of the same address first, so they
go only with the last row that refers to them. Catalogs written before hold the bytes in every
row; both layouts are read alike.
"""

from __future__ import annotations

import hashlib
import json
from typing import Iterable, Optional

from ..errors import SkillNotFoundError, StoreError
from .catalog import migration, utc_now
from .protocols import Catalog

__all__ = ["SkillRecords"]

_BUMP = "UPDATE catalog_state SET version = version + 1 WHERE id = 1"
_LAST_VERSION = "skill.last_version:"  # a setting per skill name: the highest version it was ever given


@migration
def m023_index_skill_file_addresses(db) -> None:
    """Find a file's bytes by their address without reading every skill's files (an import asks
    for each file it stores: a scan made a catalog's imports slower as it grew)."""
    db.execute("CREATE INDEX idx_skill_files_sha256 ON skill_files (sha256)")


class SkillRecords:
    """Skills, their versions, files and parts; mixed into ``BlockStore``."""

    catalog: Catalog

    # -- reads -----------------------------------------------------------------------------

    def skill_names(self) -> list[str]:
        return [row["name"] for row in self._select("SELECT name FROM skills ORDER BY name")]

    def skill_default(self, name: str) -> int:
        rows = self._select("SELECT default_version FROM skills WHERE name = ?", [name])
        if not rows:
            raise SkillNotFoundError(name)
        return int(rows[0]["default_version"])

    def skill_versions(self, name: str) -> list[dict]:
        """Every version row of skill ``name``, oldest first, its record parsed."""
        rows = self._select("SELECT * FROM skill_versions WHERE name = ? ORDER BY version", [name])
        return [{**row, "version": int(row["version"]), "record": json.loads(row["record"])} for row in rows]

    def skill_version(self, name: str, version: Optional[int] = None) -> dict:
        """One version row of ``name`` (the default when ``version`` is None)."""
        version = self.skill_default(name) if version is None else int(version)
        for row in self.skill_versions(name):
            if row["version"] == version:
                return row
        raise SkillNotFoundError(name, version)

    def skill_key_vectors(self, name: str, embedder: str, kinds: Iterable[str]) -> dict[str, bytes]:
        """The stored vector of each routing key text of skill ``name``'s blocks (any version)
        that ``embedder`` made, of the key kinds ``kinds``."""
        kinds = set(kinds)
        rows = self._select(  # by the skill's blocks (an embedder's keys are all of them: filtered here)
            "SELECT text, vector, embedder, kind FROM routing_keys"
            " WHERE block_id IN (SELECT block_id FROM skill_blocks WHERE name = ?)", [name],
        )
        return {row["text"]: bytes(row["vector"]) for row in rows
                if row["vector"] is not None and row["embedder"] == embedder and row["kind"] in kinds}

    def skill_parts(self, name: str, version: int) -> list[dict]:
        return [
            {**row, "version": int(row["version"]), "part": int(row["part"])}
            for row in self._select(
                "SELECT * FROM skill_blocks WHERE name = ? AND version = ? ORDER BY part", [name, int(version)]
            )
        ]

    def skill_files(self, name: str, version: int, *, with_data: bool = False, path: Optional[str] = None) -> list[dict]:
        """The files of a version (or its one file at ``path``), by path: ``path``, ``size``,
        ``sha256`` and with ``with_data`` their bytes (:class:`StoreError` when the catalog has
        none that match them)."""
        columns = "path, size, sha256" + (", data" if with_data else "")
        only = "" if path is None else " AND path = ?"
        rows = self._select(f"SELECT {columns} FROM skill_files WHERE name = ? AND version = ?{only} ORDER BY path",
                            [name, int(version), *(() if path is None else (path,))])
        files = [{**row, "size": int(row["size"])} for row in rows]
        if with_data:
            for row in files:
                row["data"] = self._file_bytes(row)
        return files

    def _file_bytes(self, row: dict) -> bytes:
        """The bytes of a file row: its own, or those of its address held by another row."""
        if row["data"] is not None and _matches(bytes(row["data"]), row):
            return bytes(row["data"])
        for held in self._select("SELECT data FROM skill_files WHERE sha256 = ? AND data IS NOT NULL", [row["sha256"]]):
            if _matches(bytes(held["data"]), row):
                return bytes(held["data"])
        raise StoreError(f"the catalog holds no bytes of {row['sha256'][:16]}… ({row['size']} bytes) for the skill "
                         f"file {row['path']!r}: import the skill again")

    def skill_of_block(self, block_id: str) -> Optional[str]:
        rows = self._select("SELECT name FROM skill_blocks WHERE block_id = ? LIMIT 1", [block_id])
        return rows[0]["name"] if rows else None

    def skill_routing(self) -> tuple[dict, set]:
        """``({block_id: skill name}, hidden)``: the skill of every skill block, and the blocks
        routing must not offer (held only by versions that are not the default, or by a skill
        that opted out of model invocation)."""
        rows = self._select(
            "SELECT b.block_id, b.name, b.version, s.default_version, v.record FROM skill_blocks b"
            " JOIN skills s ON s.name = b.name JOIN skill_versions v ON v.name = b.name AND v.version = b.version"
        )
        group: dict[str, str] = {}
        routable: set[str] = set()
        for row in rows:
            group[row["block_id"]] = row["name"]
            if int(row["version"]) == int(row["default_version"]) and json.loads(row["record"]).get("model_invocable", True):
                routable.add(row["block_id"])
        return group, set(group) - routable

    def next_skill_version(self, name: str) -> int:
        """The number the next version of ``name`` gets: above every version it ever had, those
        removed (and the skill's own removal) included, so a version id is never reused."""
        rows = self._select("SELECT MAX(version) AS top FROM skill_versions WHERE name = ?", [name])
        held = int(rows[0]["top"]) if rows and rows[0]["top"] is not None else 0
        given = self._select("SELECT value FROM settings WHERE key = ?", [_LAST_VERSION + name])
        return max(held, int(given[0]["value"]) if given and str(given[0]["value"]).isdigit() else 0) + 1

    def skill_part_roles(self) -> dict:
        """``{block_id: (role, part, title)}`` of the parts of every skill's default version."""
        rows = self._select(
            "SELECT b.block_id, b.role, b.part, b.title FROM skill_blocks b"
            " JOIN skills s ON s.name = b.name AND s.default_version = b.version"
        )
        return {row["block_id"]: (row["role"], int(row["part"]), row["title"]) for row in rows}

    def skill_defaults(self) -> dict[str, dict]:
        """``{name: {version, description, created_at, folder, blocks}}``: the default version of every
        skill, by name, with the block ids of its parts in order (one read, however many skills)."""
        rows = self._select(
            "SELECT v.name, v.version, v.description, v.created_at, v.folder, b.block_id FROM skills s"
            " JOIN skill_versions v ON v.name = s.name AND v.version = s.default_version"
            " LEFT JOIN skill_blocks b ON b.name = v.name AND b.version = v.version ORDER BY v.name, b.part"
        )
        found: dict[str, dict] = {}
        for row in rows:
            entry = found.setdefault(row["name"], {"version": int(row["version"]), "description": row["description"],
                                                   "created_at": row["created_at"] or "", "folder": row["folder"],
                                                   "blocks": []})
            if row["block_id"] is not None:
                entry["blocks"].append(row["block_id"])
        return found

    # -- writes ----------------------------------------------------------------------------

    def add_skill_version(
        self, name: str, version: int, *, folder: str, manifest_sha256: str, description: str, record: dict,
        files: Iterable[tuple[str, int, str, Optional[bytes]]], parts: Iterable[tuple[int, str, str, str]],
        make_default: bool = True,
    ) -> None:
        """Store version ``version`` of skill ``name``: its files ``(path, size, sha256, data)``
        and parts ``(part, block_id, role, title)``; it becomes the default when asked (or the first)."""
        self._require_writable(f"store skill {name!r}")
        with self.catalog.write() as conn:
            known = conn.execute("SELECT default_version FROM skills WHERE name = ?", (name,)).fetchone()
            if known is None:
                conn.execute("INSERT INTO skills (name, default_version, created_at) VALUES (?, ?, ?)", (name, version, utc_now()))
            elif make_default:
                conn.execute("UPDATE skills SET default_version = ? WHERE name = ?", (version, name))
            conn.execute(
                "INSERT INTO skill_versions (name, version, folder, manifest_sha256, description, record, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (name, version, folder, manifest_sha256, description, json.dumps(record, sort_keys=True), utc_now()),
            )
            for path, size, sha256, data in files:
                data = _addressed(path, size, sha256, data)
                if _held(conn, sha256, size):
                    data = None  # another row holds these bytes already
                conn.execute(
                    "INSERT INTO skill_files (name, version, path, size, sha256, data) VALUES (?, ?, ?, ?, ?, ?)",
                    (name, version, path, size, sha256, data),
                )
            for part, block_id, role, title in parts:
                conn.execute(
                    "INSERT INTO skill_blocks (name, version, part, block_id, role, title) VALUES (?, ?, ?, ?, ?, ?)",
                    (name, version, part, block_id, role, title),
                )
            given = conn.execute("SELECT value FROM settings WHERE key = ?", (_LAST_VERSION + name,)).fetchone()
            if given is None or not str(given[0]).isdigit() or int(given[0]) < version:
                conn.execute("INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET"
                             " value = excluded.value", (_LAST_VERSION + name, str(version)))
            conn.execute(_BUMP)

    def set_skill_default(self, name: str, version: int) -> None:
        self.skill_version(name, version)
        self._require_writable(f"change skill {name!r}")
        with self.catalog.write() as conn:
            conn.execute("UPDATE skills SET default_version = ? WHERE name = ?", (int(version), name))
            conn.execute(_BUMP)

    def remove_skill_version(self, name: str, version: int) -> list[str]:
        """Drop version ``version`` of ``name`` (the skill with its last one); return the ids of
        the blocks no version of any skill holds any more (the caller removes them). The
        default moves to the latest version left."""
        self.skill_version(name, version)
        self._require_writable(f"remove skill {name!r}")
        with self.catalog.write() as conn:
            held = [r[0] for r in conn.execute(
                "SELECT block_id FROM skill_blocks WHERE name = ? AND version = ?", (name, version)).fetchall()]
            _hand_over_bytes(conn, name, version)
            for table in ("skill_blocks", "skill_files", "skill_versions"):
                conn.execute(f"DELETE FROM {table} WHERE name = ? AND version = ?", (name, version))
            left = conn.execute("SELECT MAX(version) FROM skill_versions WHERE name = ?", (name,)).fetchone()[0]
            if left is None:
                conn.execute("DELETE FROM skills WHERE name = ?", (name,))
                conn.execute("DELETE FROM skill_pins WHERE name = ?", (name,))
            else:
                conn.execute(
                    "UPDATE skills SET default_version = ? WHERE name = ? AND default_version = ?", (left, name, version)
                )
            orphans = [
                block_id for block_id in dict.fromkeys(held)
                if conn.execute("SELECT 1 FROM skill_blocks WHERE block_id = ? LIMIT 1", (block_id,)).fetchone() is None
            ]
            conn.execute(_BUMP)
        return orphans


def _matches(data: bytes, row: dict) -> bool:
    return len(data) == int(row["size"]) and hashlib.sha256(data).hexdigest() == row["sha256"]


def _addressed(path: str, size: int, sha256: str, data: Optional[bytes]) -> bytes:
    """``data``, checked to be the bytes its address and size say (nothing given is trusted)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise StoreError(f"the skill file {path!r} comes without its bytes")
    data = bytes(data)
    if not _matches(data, {"size": size, "sha256": sha256}):
        raise StoreError(f"the skill file {path!r} is not the {size} bytes of SHA-256 {str(sha256)[:16]}… it claims")
    return data


def _held(conn, sha256: str, size: int) -> bool:
    """Whether a row of the catalog holds the bytes of this address (checked, not assumed)."""
    for (data,) in conn.execute("SELECT data FROM skill_files WHERE sha256 = ? AND data IS NOT NULL",
                                (sha256,)).fetchall():
        if _matches(bytes(data), {"size": size, "sha256": sha256}):
            return True
    return False


def _hand_over_bytes(conn, name: str, version: int) -> None:
    """Before version ``version`` of ``name`` goes: the bytes its rows hold, to a row of another
    version (of any skill) at the same address that holds none, if there is one."""
    rows = conn.execute("SELECT sha256, data FROM skill_files WHERE name = ? AND version = ? AND data IS NOT NULL",
                        (name, version)).fetchall()
    for sha256, data in rows:
        heir = conn.execute(
            "SELECT name, version, path FROM skill_files WHERE sha256 = ? AND data IS NULL"
            " AND NOT (name = ? AND version = ?) LIMIT 1", (sha256, name, version)).fetchone()
        if heir is not None:
            conn.execute("UPDATE skill_files SET data = ? WHERE name = ? AND version = ? AND path = ?",
                         (data, heir[0], heir[1], heir[2]))
