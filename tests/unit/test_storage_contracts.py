"""The storage protocols: the fakes and the real local backends keep the same contracts, and a
store runs on the fakes alone."""

from __future__ import annotations

import pytest

from skillgraft.errors import BlockIntegrityError, StoreError
from skillgraft.store import block_objects
from skillgraft.store.block_folder import FolderBlocks
from skillgraft.store.block_objects import ObjectBlocks
from skillgraft.store.block_store import BlockStore
from skillgraft.store.catalog import SqliteCatalog
from skillgraft.store.check import CheckedStore
from skillgraft.testing import FakeEngine, MemoryBlocks, MemoryCatalog

from ..storage_contracts import check_block_storage, check_catalog

CATALOGS = {
    "memory": lambda tmp_path: MemoryCatalog(),
    "sqlite": lambda tmp_path: SqliteCatalog(tmp_path / "catalog.db"),
}
STORAGES = {
    "memory": lambda tmp_path: MemoryBlocks(tmp_path / "never-written"),
    "folder": lambda tmp_path: FolderBlocks(tmp_path / "blocks", tmp_path / "quarantine"),
    "file-url": lambda tmp_path: ObjectBlocks(f"file://{tmp_path / 'mount'}", tmp_path / "cache"),
}


@pytest.mark.parametrize("kind", CATALOGS)
def test_catalogs_keep_the_catalog_contract(kind, tmp_path):
    catalog = CATALOGS[kind](tmp_path)
    try:
        check_catalog(catalog)
    finally:
        catalog.close()


@pytest.mark.parametrize("kind", STORAGES)
def test_block_storages_keep_the_storage_contract(kind, tmp_path, monkeypatch):
    monkeypatch.setattr(block_objects, "UNCLAIMED_GRACE_S", -60.0)  # no deposit is in progress here
    check_block_storage(STORAGES[kind](tmp_path))
    if kind == "memory":
        assert not (tmp_path / "never-written").exists()


def test_a_store_runs_on_the_fakes_alone(tmp_path):
    blocks = MemoryBlocks(tmp_path / "never-written")
    store = BlockStore(tmp_path / "home", catalog=MemoryCatalog(), blocks=blocks)
    engine = FakeEngine()
    block, created = store.put(engine.capture("a manual kept in memory"), name="m", kind="manual", source="x")
    assert created and store.get("m") == block and len(store) == 1 and isinstance(store, CheckedStore)
    assert store.load_state(block).state.sha256 == block.sha256 and store.check().ok

    damaged = bytearray(blocks.payloads[block.file_name])
    damaged[-1] ^= 0xFF
    blocks.payloads[block.file_name] = bytes(damaged)
    store.evict(block.sha256)
    with pytest.raises(BlockIntegrityError, match="moved to quarantine"):
        store.load_state(block)
    assert store.get("m").status == "quarantined" and list(blocks.quarantined.values()) == [bytes(damaged)]

    blocks.payloads["ab" * 32 + ".kv"] = b"no row claims this"
    report = store.check()
    assert [p["problem"] for p in report.problems] == ["quarantined", "file without a catalog row"]
    assert [r["file"] for r in store.check(repair=True).repaired] == ["ab" * 32 + ".kv"]
    assert store.remove("m").id == block.id and len(store) == 0 and not blocks.payloads
    store.close()
    assert not list((tmp_path / "home").iterdir()) and not (tmp_path / "never-written").exists()


def test_a_fake_folder_that_cannot_be_written_is_refused(tmp_path):
    with pytest.raises(StoreError, match="cannot write"):
        BlockStore(tmp_path / "home", catalog=MemoryCatalog(), blocks=MemoryBlocks(writable=False))
