"""Namespaces: several memories in one home, each reading one shared base.

The home's own store (its ``catalog.db``, ``blocks/``, derived states ...) is the namespace
``default``, and it is the *base* every other namespace reads. Namespace ``NAME`` is a store of
its own at ``HOME/namespaces/NAME/``: its skills, blocks, solutions, routing corrections,
ledger, settings, router index and derived KV states live there and nowhere else. A
namespace's memory routes over its own store and the base, the better decision winning (a
graft over an abstain, then the higher score; a verified answer of its own before the base's),
and lists, reads and answers from both; it writes only to its own store: the base is read-only
to it (:class:`~skillgraft.errors.SharedBaseError`), published by whoever opens ``default``.

On a shared store (a PostgreSQL catalog, blocks in object storage) a namespace's catalog is a
schema of its own in the same database (:func:`catalog_schema`) and its blocks and published
states lie under ``namespaces/NAME/`` of the blocks prefix; each host keeps the namespace's
cache and router index in ``HOME/namespaces/NAME/``. Writers of every namespace take the one
write lock of the database.

A name is 1-64 of ``a-z``, ``0-9``, ``.``, ``_`` and ``-``, opening with a letter or digit
(:data:`NAMESPACE`, the key file's rule): it cannot hold a path separator, open with a dot or
leave the home. Anything else is a :class:`~skillgraft.errors.NamespaceError`.

:func:`delete_namespace` deletes a namespace's store in a home: its folder, with its catalog,
blocks, derived KV states, ledger and router index; the base and the other namespaces are left
as they are.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Union

from ..core.recall import Recall
from ..errors import ConfigError, InputError, NamespaceError, StoreError
from ..kv.prefix_keys import reuse_scope
from ..store.derived_states import NAMESPACES_FOLDER

__all__ = [
    "DEFAULT_NAMESPACE", "NAMESPACE", "NAMESPACES_FOLDER", "NamespaceDeletion", "better_recall", "catalog_schema",
    "check_namespace", "delete_namespace", "namespace_backends", "namespace_home", "namespace_scope", "namespaces",
    "open_base",
]

DEFAULT_NAMESPACE = "default"
NAMESPACE = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")


def check_namespace(namespace: Optional[str]) -> str:
    """``namespace`` checked (None is ``default``); :class:`NamespaceError` if it is no name."""
    if namespace is None:
        return DEFAULT_NAMESPACE
    if not isinstance(namespace, str) or not NAMESPACE.fullmatch(namespace):
        raise NamespaceError(namespace)
    return namespace


def namespace_scope(namespace: Optional[str], salt: str = "") -> str:
    """The reuse scope (:func:`~skillgraft.kv.prefix_keys.reuse_scope`) of ``namespace``'s
    prompts that give ``salt``: ``""`` for the default namespace without a salt."""
    namespace = check_namespace(namespace)
    return reuse_scope("" if namespace == DEFAULT_NAMESPACE else namespace, salt)


def namespace_home(home: Union[str, Path], namespace: Optional[str]) -> Path:
    """The store folder of ``namespace`` in ``home`` (``home`` itself for ``default``); for a
    shared store, this host's cache and router index of the namespace."""
    namespace = check_namespace(namespace)
    home = Path(home).expanduser()
    return home if namespace == DEFAULT_NAMESPACE else home / NAMESPACES_FOLDER / namespace


def namespace_backends(namespace: Optional[str], catalog=None, blocks=None, *, read_only: bool = False) -> tuple:
    """The catalog and blocks of ``namespace``'s own store, given the home's (URLs, None for the
    environment's, or objects): a shared PostgreSQL catalog is opened on the namespace's schema
    (:func:`catalog_schema`) and shared blocks lie under ``NAMESPACES_FOLDER/NAME/`` of their
    prefix; a store in the home keeps its defaults (the namespace's folder holds them)."""
    from ..store.backends import blocks_url, catalog_url

    namespace = check_namespace(namespace)
    if namespace == DEFAULT_NAMESPACE:
        return catalog, blocks
    if not isinstance(catalog, (str, type(None))) or not isinstance(blocks, (str, type(None))):
        raise ConfigError(f"namespace {namespace!r} needs its store named by URLs (or the home's), not objects: "
                          "one catalog object cannot keep namespaces apart")
    if catalog is None or isinstance(catalog, str):
        url = catalog_url(catalog)
        if url is not None:
            from ..store.catalog_postgres import PostgresCatalog

            catalog = PostgresCatalog(url, read_only=read_only, schema=catalog_schema(namespace))
    if blocks is None or isinstance(blocks, str):
        url = blocks_url(blocks)
        if url is not None:
            blocks = f"{url.rstrip('/')}/{NAMESPACES_FOLDER}/{namespace}"
    return catalog, blocks


def open_base(home: Path, namespace: str, catalog=None, blocks=None):
    """The home's store, read-only: the base ``namespace``'s memory reads (None for ``default``,
    and while a home in a folder holds no store yet)."""
    from ..store.backends import catalog_url
    from ..store.block_store import BlockStore

    if check_namespace(namespace) == DEFAULT_NAMESPACE:
        return None
    if catalog_url(catalog) is None and not (Path(home) / "catalog.db").is_file():
        return None
    return BlockStore(home, read_only=True, catalog=catalog, blocks=blocks)


def catalog_schema(namespace: str) -> str:
    """The PostgreSQL schema of a namespace's catalog: ``sg_ns_`` and 32 hex digits of its name's
    SHA-256 (a name can be longer than an identifier may)."""
    return "sg_ns_" + hashlib.sha256(check_namespace(namespace).encode()).hexdigest()[:32]


def better_recall(own: Recall, base: Recall) -> Recall:
    """The decision a namespace takes from its own store's ``own`` and the base's ``base``: a
    verified answer (``exact``) or graft over an abstain, its own first, then the higher score."""
    rank = {"exact": 2, "graft": 1}

    def key(recall: Recall) -> tuple:
        return rank.get(recall.decision, 0), recall.score if recall.decision != "abstain" else 0.0

    return base if key(base) > key(own) else own


def namespaces(home: Union[str, Path]) -> list[str]:
    """The namespaces with a store in ``home``, by name (``default``, the home's own, aside)."""
    folder = Path(home).expanduser() / NAMESPACES_FOLDER
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if NAMESPACE.fullmatch(p.name) and p.is_dir() and not p.is_symlink())


@dataclass(frozen=True)
class NamespaceDeletion:
    """What :func:`delete_namespace` removed: the namespace's folder, its files and their bytes."""

    namespace: str
    folder: str
    files: int
    bytes: int

    def as_dict(self) -> dict:
        return asdict(self)


def delete_namespace(home: Union[str, Path], namespace: str, catalog=None, blocks=None) -> NamespaceDeletion:
    """Delete namespace ``namespace``'s store in ``home``: its folder, whatever it holds (catalog,
    blocks, derived KV states, ledger, index). ``default`` (the home's own store, every namespace's
    base) is never deleted; a home whose stores are shared (``catalog``/``blocks`` URLs, or the
    environment's) is refused: its namespaces live in the database and the bucket."""
    from ..store.backends import blocks_url, catalog_url

    namespace = check_namespace(namespace)
    if namespace == DEFAULT_NAMESPACE:
        raise InputError("namespace 'default' is the home's own store, the base every namespace reads: it is not deleted")
    if catalog_url(catalog) is not None or blocks_url(blocks) is not None:
        raise ConfigError(f"namespace {namespace!r} lives in a shared store (a PostgreSQL schema, a blocks prefix): "
                          "this command deletes namespaces of a home's own store only")
    folder = namespace_home(home, namespace)
    if folder.is_symlink() or not folder.is_dir():
        raise StoreError(f"no namespace {namespace!r} in {Path(home).expanduser()}")
    files = size = 0
    for root, _, names in os.walk(folder):  # links are not followed: what they point to stays
        for name in names:
            files += 1
            size += os.lstat(os.path.join(root, name)).st_size
    try:
        shutil.rmtree(folder)
    except OSError as exc:
        raise StoreError(f"cannot delete namespace {namespace!r} ({folder}): {exc.strerror or exc}") from exc
    return NamespaceDeletion(namespace, str(folder), files, size)
