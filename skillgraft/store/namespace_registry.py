"""Namespace names, and where a namespace of a shared store lies: its schema, its prefix, its row.

A name is 1-64 of ``a-z``, ``0-9``, ``.``, ``_`` and ``-``, opening with a letter or digit
(:data:`NAMESPACE`, :func:`check_namespace`). On a shared store a namespace's catalog is the
PostgreSQL schema :func:`catalog_schema` of the base's database and its blocks and published
states lie under :func:`namespace_blocks_url` of the base's blocks.

A schema's name is a digest that does not give the namespace's name back, so the base catalog
keeps the names in its ``namespaces`` table (migration m022; the table is in every catalog, only
the shared base's is written): a namespace is registered (:func:`register`) whenever its catalog
is opened for writing, before its schema is made, and unregistered (:func:`unregister`) last
when it is deleted. The rows are input from whoever can write the catalog: :func:`registered`
lists only those that are namespace names.
"""

from __future__ import annotations

import hashlib
import re
from typing import Optional

from ..errors import NamespaceError
from .catalog import migration, utc_now
from .derived_states import NAMESPACES_FOLDER
from .protocols import Catalog

__all__ = [
    "DEFAULT_NAMESPACE", "NAMESPACE", "catalog_schema", "check_namespace", "drop_schema", "namespace_blocks_url",
    "register", "registered", "schema_exists", "unregister",
]

DEFAULT_NAMESPACE = "default"
NAMESPACE = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


@migration
def m022_create_namespaces(db) -> None:
    """The names of the namespaces whose catalogs are schemas of this (the base's) database."""
    db.execute("CREATE TABLE namespaces (name TEXT PRIMARY KEY, created_at TEXT NOT NULL)")


def check_namespace(namespace: Optional[str]) -> str:
    """``namespace`` checked (None is ``default``); :class:`NamespaceError` if it is no name."""
    if namespace is None:
        return DEFAULT_NAMESPACE
    if not isinstance(namespace, str) or not NAMESPACE.fullmatch(namespace):
        raise NamespaceError(namespace)
    return namespace


def catalog_schema(namespace: str) -> str:
    """The PostgreSQL schema of a namespace's catalog: ``sg_ns_`` and 32 hex digits of its name's
    SHA-256 (a name can be longer than an identifier may)."""
    return "sg_ns_" + hashlib.sha256(check_namespace(namespace).encode()).hexdigest()[:32]


def namespace_blocks_url(url: str, namespace: str) -> str:
    """Where namespace ``namespace``'s blocks and published states lie, given the base's blocks ``url``."""
    return f"{url.rstrip('/')}/{NAMESPACES_FOLDER}/{check_namespace(namespace)}"


def register(catalog: Catalog, namespace: str) -> None:
    """Record ``namespace`` in the base ``catalog`` (nothing when it is recorded already)."""
    namespace = check_namespace(namespace)
    if catalog.query("SELECT name FROM namespaces WHERE name = ?", [namespace]):
        return
    with catalog.write() as conn:
        conn.execute("INSERT OR IGNORE INTO namespaces (name, created_at) VALUES (?, ?)", [namespace, utc_now()])


def registered(catalog: Catalog) -> list[str]:
    """The namespaces recorded in the base ``catalog``, by name (a row that is no name: left out)."""
    names = (row["name"] for row in catalog.query("SELECT name FROM namespaces ORDER BY name"))
    return [name for name in names
            if isinstance(name, str) and NAMESPACE.fullmatch(name) and name != DEFAULT_NAMESPACE]


def unregister(catalog: Catalog, namespace: str) -> None:
    """Forget ``namespace`` in the base ``catalog``."""
    with catalog.write() as conn:
        conn.execute("DELETE FROM namespaces WHERE name = ?", [check_namespace(namespace)])


def schema_exists(catalog: Catalog, namespace: str) -> bool:
    """Whether namespace ``namespace``'s schema is in ``catalog``'s (PostgreSQL) database."""
    return bool(catalog.query("SELECT 1 FROM information_schema.schemata WHERE schema_name = ?",
                              [catalog_schema(namespace)]))


def drop_schema(catalog: Catalog, namespace: str) -> None:
    """Drop namespace ``namespace``'s schema and every table in it (nothing when it is gone)."""
    with catalog.write() as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{catalog_schema(namespace)}" CASCADE')
