"""Which catalog and which block storage a store uses, from URLs.

``catalog``: None (the default) is the SQLite file ``<home>/catalog.db``; ``postgresql://…``
is a shared PostgreSQL catalog. ``blocks``: None is the folder ``<home>/blocks``;
``s3://bucket/prefix`` is an S3 bucket (endpoint and credentials from the usual ``AWS_*``
environment variables), ``file:///path`` a folder on a shared mount. When an argument is
None the environment decides: ``$SKILLGRAFT_CATALOG`` and ``$SKILLGRAFT_BLOCKS``.
An object that is already a :class:`~skillgraft.store.protocols.Catalog` or
:class:`~skillgraft.store.protocols.BlockStorage` (a fake of :mod:`skillgraft.testing`, say)
is used as it is. URLs are shown only without their password.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Union

from .block_folder import FolderBlocks
from .catalog import SqliteCatalog
from ..errors import ConfigError
from .protocols import BlockStorage, Catalog

__all__ = ["blocks_url", "catalog_url", "open_block_storage", "open_catalog_backend"]

CATALOG_SCHEMES = ("postgresql://", "postgres://")
BLOCKS_SCHEMES = ("s3://", "file://")


def catalog_url(given: Optional[str] = None) -> Optional[str]:
    """The catalog URL in force (``given``, else ``$SKILLGRAFT_CATALOG``); None for SQLite in the home."""
    url = given if given is not None else os.environ.get("SKILLGRAFT_CATALOG")
    if not url or url == "sqlite":
        return None
    if not url.startswith(CATALOG_SCHEMES):
        raise ConfigError(f"the catalog must be a postgresql:// URL (or unset for SQLite in the home), got {url.split('://')[0]}://…")
    return url


def blocks_url(given: Optional[str] = None) -> Optional[str]:
    """The blocks URL in force (``given``, else ``$SKILLGRAFT_BLOCKS``); None for the home's folder."""
    url = given if given is not None else os.environ.get("SKILLGRAFT_BLOCKS")
    if not url:
        return None
    if not url.startswith(BLOCKS_SCHEMES):
        raise ConfigError(f"the blocks must be an s3:// or file:// URL (or unset for the home's folder), got {url!r}")
    return url


def open_catalog_backend(given: Union[str, Catalog, None], home: Path, *, read_only: bool) -> Catalog:
    """The catalog backend the URL names (SQLite in ``home`` by default)."""
    if given is not None and not isinstance(given, str):
        return given
    url = catalog_url(given)
    if url is None:
        return SqliteCatalog(Path(home) / "catalog.db", read_only=read_only)
    from .catalog_postgres import PostgresCatalog

    return PostgresCatalog(url, read_only=read_only)


def open_block_storage(given: Union[str, BlockStorage, None], home: Union[str, Path]) -> BlockStorage:
    """The block storage the URL names (``home/blocks`` by default); a shared one caches in ``home/cache``."""
    if given is not None and not isinstance(given, str):
        return given
    home = Path(home)
    url = blocks_url(given)
    if url is None:
        return FolderBlocks(home / "blocks", home / "quarantine")
    from .block_objects import ObjectBlocks

    return ObjectBlocks(url, home / "cache")
