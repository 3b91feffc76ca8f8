"""The store: the block store facade, its reads, edits and integrity check, the protocols of
its backends, the catalogs (SQLite, PostgreSQL), block storage (a folder, object storage) and
the ledger."""

from .block_store import BlockStore
from .check import CheckReport

__all__ = ["BlockStore", "CheckReport"]
