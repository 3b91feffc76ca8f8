"""A relaxed catalog write (the ledger's) fails as a plain one does, and leaves the catalog's
writes waiting for the disk again."""

from __future__ import annotations

import pytest

from skillgraft.errors import StoreError
from skillgraft.store.catalog import SqliteCatalog


def _sync(catalog) -> int:
    return catalog.db.conn.execute("PRAGMA synchronous").fetchone()[0]


def test_a_relaxed_write_inside_a_read_transaction_is_a_store_error(tmp_path):
    catalog = SqliteCatalog(tmp_path / "catalog.db")
    with pytest.raises(StoreError):
        with catalog.read():
            with catalog.write(relaxed=True) as conn:
                conn.execute("CREATE TABLE t (x)")
    assert _sync(catalog) == 2 and not catalog.db.conn.in_transaction


def test_a_failed_relaxed_write_sets_full_sync_again(tmp_path):
    catalog = SqliteCatalog(tmp_path / "catalog.db")
    with pytest.raises(ValueError):
        with catalog.write(relaxed=True) as conn:
            conn.execute("CREATE TABLE t (x)")
            raise ValueError("boom")
    assert _sync(catalog) == 2 and catalog.query("SELECT name FROM sqlite_master WHERE name = 't'") == []
