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
schema of its own in the same database (:func:`catalog_schema`), its name recorded in the base's
registry (:mod:`skillgraft.store.namespace_registry`), and its blocks and published states lie
under ``namespaces/NAME/`` of the blocks prefix; each host keeps the namespace's cache and router
index in ``HOME/namespaces/NAME/``. Writers of every namespace take the one write lock of the
database.

A name is 1-64 of ``a-z``, ``0-9``, ``.``, ``_`` and ``-``, opening with a letter or digit
(:data:`NAMESPACE`, the key file's rule): it cannot hold a path separator, open with a dot or
leave the home. Anything else is a :class:`~skillgraft.errors.NamespaceError`.

:func:`namespaces` lists a home's namespaces and :func:`delete_namespace` deletes one whole: its
folder, with its catalog, blocks, derived KV states, ledger and router index, and on a shared
store its schema and the objects under its prefix; the base and the other namespaces are left as
they are.
"""

from __future__ import annotations

import os
import shutil
from contextlib import closing
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Optional, Union

from ..core.recall import Recall
from ..errors import ConfigError, InputError, NamespaceNotFoundError, StoreError
from ..kv.prefix_keys import reuse_scope
from ..routing.ranking import NO_ROUTABLE_BLOCKS
from ..store.derived_states import NAMESPACES_FOLDER
from ..store.namespace_registry import (
    DEFAULT_NAMESPACE, NAMESPACE, catalog_schema, check_namespace, drop_schema, namespace_blocks_url, register, registered,
    schema_exists, unregister,
)

__all__ = [
    "DEFAULT_NAMESPACE", "NAMESPACE", "NAMESPACES_FOLDER", "NamespaceDeletion", "better_recall", "catalog_schema",
    "check_namespace", "delete_namespace", "namespace_backends", "namespace_home", "namespace_scope", "namespaces",
    "open_base", "scope_namespace",
]


def scope_namespace(namespace: Optional[str]) -> str:
    """``namespace`` checked, as its reuse scopes name it: ``""`` for the default namespace."""
    namespace = check_namespace(namespace)
    return "" if namespace == DEFAULT_NAMESPACE else namespace


def namespace_scope(namespace: Optional[str], salt: str = "") -> str:
    """The reuse scope (:func:`~skillgraft.kv.prefix_keys.reuse_scope`) of ``namespace``'s
    prompts that give ``salt``: ``""`` for the default namespace without a salt."""
    return reuse_scope(scope_namespace(namespace), salt)


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

            if not read_only:  # recorded in the base before its schema is made: listed, and deleted whole
                with closing(PostgresCatalog(url)) as base:
                    register(base, namespace)
            catalog = PostgresCatalog(url, read_only=read_only, schema=catalog_schema(namespace))
    if blocks is None or isinstance(blocks, str):
        url = blocks_url(blocks)
        if url is not None:
            blocks = namespace_blocks_url(url, namespace)
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


def better_recall(own: Recall, base: Recall) -> Recall:
    """The decision a namespace takes from its own store's ``own`` and the base's ``base``: a
    verified answer (``exact``) or graft over an abstain, its own first, then the higher score.
    An abstain that ranked none of the namespace's own blocks is the base's, its reason telling
    both stores (no routable blocks only when neither has any)."""
    if own.decision == base.decision == "abstain" and not own.candidates:
        return _unranked(own, base)
    rank = {"exact": 2, "graft": 1}

    def key(recall: Recall) -> tuple:
        return rank.get(recall.decision, 0), recall.score if recall.decision != "abstain" else 0.0

    return base if key(base) > key(own) else own


def _unranked(own: Recall, base: Recall) -> Recall:
    if own.reason == base.reason == NO_ROUTABLE_BLOCKS:
        return replace(own, reason="no routable blocks: neither this namespace's store nor the base has any")
    mine = "this namespace's own store is empty" if own.reason == NO_ROUTABLE_BLOCKS \
        else f"this namespace's own store: {own.reason}"
    return replace(base, reason=f"{mine}; the base: {base.reason}")


def namespaces(home: Union[str, Path], catalog: Optional[str] = None) -> list[str]:
    """The namespaces of ``home``, by name (``default``, the home's own, aside): those recorded in
    its shared catalog (a URL, or the environment's) when it has one, else those with a store in
    its folder."""
    from ..store.backends import catalog_url

    url = catalog_url(catalog)
    if url is not None:
        with closing(open_shared_base(url, read_only=True)) as base:  # a listing writes nothing
            return registered(base)
    folder = Path(home).expanduser() / NAMESPACES_FOLDER
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if NAMESPACE.fullmatch(p.name) and p.is_dir() and not p.is_symlink())


def open_shared_base(url: str, *, read_only: bool = False):
    """The base catalog of the shared store ``url``, its migrations applied (its registry among
    them) unless ``read_only``."""
    from ..store.catalog_postgres import PostgresCatalog

    return PostgresCatalog(url, read_only=read_only)


@dataclass(frozen=True)
class NamespaceDeletion:
    """What :func:`delete_namespace` removed: this host's folder of the namespace, its files and
    their bytes; on a shared store its ``schema`` too (None on a home's own) and the ``objects``
    under its blocks prefix, with their bytes."""

    namespace: str
    folder: str
    files: int
    bytes: int
    schema: Optional[str] = None
    objects: int = 0
    object_bytes: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def delete_namespace(home: Union[str, Path], namespace: str, catalog=None, blocks=None) -> NamespaceDeletion:
    """Delete namespace ``namespace`` of ``home`` whole: its skills, blocks, solutions, corrections,
    ledger, derived KV states and router index. ``default`` (the home's own store, every namespace's
    base) is never deleted; an unknown name is a :class:`NamespaceNotFoundError`.

    On a shared store (``catalog``/``blocks`` URLs, or the environment's) that is every object under
    the namespace's blocks prefix, then its schema, then this host's folder, and last its name in
    the base's registry: a deletion cut short is finished by running it again. Other hosts' folders
    of it are caches, unused once it is gone; a gateway serving it should be stopped first (one
    opening it again would record and create it anew, empty)."""
    from ..store.backends import blocks_url, catalog_url, open_block_storage

    namespace = check_namespace(namespace)
    if namespace == DEFAULT_NAMESPACE:
        raise InputError("namespace 'default' is the home's own store, the base every namespace reads: it is not deleted")
    home = Path(home).expanduser()
    folder = namespace_home(home, namespace)
    local = folder.is_dir() and not folder.is_symlink()
    url, objects_url = catalog_url(catalog), blocks_url(blocks)
    if url is None and objects_url is None:
        if not local:
            raise NamespaceNotFoundError(namespace, str(home))
        return NamespaceDeletion(namespace, str(folder), *remove_folder(namespace, folder))
    base = open_shared_base(url) if url is not None else None
    try:
        if not local and (base is None or (namespace not in registered(base) and not schema_exists(base, namespace))):
            raise NamespaceNotFoundError(namespace, base.where if base is not None else str(home))
        objects = object_bytes = 0
        if objects_url is not None:
            objects, object_bytes = open_block_storage(namespace_blocks_url(objects_url, namespace), folder).delete_all()
        if base is not None:
            drop_schema(base, namespace)
        files, size = remove_folder(namespace, folder) if local else (0, 0)
        if base is not None:
            unregister(base, namespace)
    finally:
        if base is not None:
            base.close()
    return NamespaceDeletion(namespace, str(folder), files, size, catalog_schema(namespace) if base is not None else None,
                             objects, object_bytes)


def remove_folder(namespace: str, folder: Path) -> tuple[int, int]:
    """Delete ``folder`` (a namespace's, on this host); its files and their bytes."""
    files = size = 0
    for root, _, names in os.walk(folder):  # links are not followed: what they point to stays
        for name in names:
            files += 1
            size += os.lstat(os.path.join(root, name)).st_size
    try:
        shutil.rmtree(folder)
    except OSError as exc:
        raise StoreError(f"cannot delete namespace {namespace!r} ({folder}): {exc.strerror or exc}") from exc
    return files, size
