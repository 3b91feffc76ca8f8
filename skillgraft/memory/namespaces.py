"""Namespaces: several memories in one home, each reading one shared base.

The home's own store (its ``catalog.db``, ``blocks/``, derived states ...) is the namespace
``default``, and it is the *base* every other namespace reads. Namespace ``NAME`` is a store of
its own at ``HOME/namespaces/NAME/``: its skills, blocks, solutions, routing corrections,
ledger, settings, router index and derived KV states live there and nowhere else. A
namespace's memory routes over its own store and the base, the better decision winning (a
graft over an abstain, then the higher score; a verified answer of its own before the base's),
and lists, reads and answers from both; it writes only to its own store: the base is read-only
to it (:class:`~skillgraft.errors.SharedBaseError`), published by whoever opens ``default``.

A name is 1-64 of ``a-z``, ``0-9``, ``.``, ``_`` and ``-``, opening with a letter or digit
(:data:`NAMESPACE`, the key file's rule): it cannot hold a path separator, open with a dot or
leave the home. Anything else is a :class:`~skillgraft.errors.NamespaceError`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional, Union

from ..core.recall import Recall
from ..errors import ConfigError, NamespaceError

__all__ = ["DEFAULT_NAMESPACE", "NAMESPACE", "NAMESPACES_FOLDER", "better_recall", "check_namespace", "namespace_home"]

DEFAULT_NAMESPACE = "default"
NAMESPACE = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
NAMESPACES_FOLDER = "namespaces"


def check_namespace(namespace: Optional[str]) -> str:
    """``namespace`` checked (None is ``default``); :class:`NamespaceError` if it is no name."""
    if namespace is None:
        return DEFAULT_NAMESPACE
    if not isinstance(namespace, str) or not NAMESPACE.fullmatch(namespace):
        raise NamespaceError(namespace)
    return namespace


def namespace_home(home: Union[str, Path], namespace: Optional[str], catalog=None, blocks=None) -> Path:
    """The store folder of ``namespace`` in ``home`` (``home`` itself for ``default``).

    A namespace other than ``default`` needs a store in the home: with a shared ``catalog`` or
    ``blocks`` URL (:mod:`skillgraft.store.backends`) it is a :class:`ConfigError`, as namespaces
    of a shared store are not kept apart yet."""
    from ..store.backends import blocks_url, catalog_url

    namespace = check_namespace(namespace)
    home = Path(home).expanduser()
    if namespace == DEFAULT_NAMESPACE:
        return home
    shared = (isinstance(catalog, str) or catalog is None) and catalog_url(catalog) is not None
    shared = shared or ((isinstance(blocks, str) or blocks is None) and blocks_url(blocks) is not None)
    if shared:
        raise ConfigError(f"namespace {namespace!r} needs a store in the home: namespaces of a shared store "
                          "(a catalog or blocks URL) are not supported yet")
    return home / NAMESPACES_FOLDER / namespace


def better_recall(own: Recall, base: Recall) -> Recall:
    """The decision a namespace takes from its own store's ``own`` and the base's ``base``: a
    verified answer (``exact``) or graft over an abstain, its own first, then the higher score."""
    rank = {"exact": 2, "graft": 1}

    def key(recall: Recall) -> tuple:
        return rank.get(recall.decision, 0), recall.score if recall.decision != "abstain" else 0.0

    return base if key(base) > key(own) else own
