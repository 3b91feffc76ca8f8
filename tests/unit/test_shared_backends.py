"""The storage seams without servers: URLs, the PostgreSQL dialect, blocks under file://."""

from __future__ import annotations

import pytest

from skillgraft.store.backends import blocks_url, catalog_url
from skillgraft.store.block_objects import ObjectBlocks
from skillgraft.store.catalog import MIGRATIONS
from skillgraft.store.catalog_postgres import POSTGRES_DDL, redact_url, to_postgres
from skillgraft.errors import BlockIntegrityError, ConfigError
from skillgraft.store.block_store import BlockStore
from skillgraft.testing import FakeEngine


def test_the_postgresql_forms_follow_the_migrations():
    names = [step.__name__ for step in MIGRATIONS]
    assert list(POSTGRES_DDL) == names[: len(POSTGRES_DDL)]  # the table-API migrations come first, in order


def test_statements_in_the_postgresql_dialect():
    assert to_postgres("SELECT * FROM blocks WHERE id = ? AND name LIKE 'a%'") == \
        "SELECT * FROM blocks WHERE id = %s AND name LIKE 'a%%'"
    assert to_postgres("INSERT OR IGNORE INTO fingerprints (id, data, created_at) VALUES (?, ?, ?)") == \
        "INSERT INTO fingerprints (id, data, created_at) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING"
    assert to_postgres("INSERT OR REPLACE INTO settings (key, value) VALUES (?, ?)") == \
        "INSERT INTO settings (key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"


def test_urls_never_show_a_password():
    assert redact_url("postgresql://app:hunter2@db.internal:5432/memory?sslmode=require") == \
        "postgresql://app:***@db.internal:5432/memory"
    assert redact_url("s3://bucket/prefix") == "s3://bucket/prefix"


def test_urls_from_arguments_then_environment(monkeypatch):
    monkeypatch.delenv("SKILLGRAFT_CATALOG", raising=False)
    monkeypatch.delenv("SKILLGRAFT_BLOCKS", raising=False)
    assert catalog_url() is None and blocks_url() is None
    monkeypatch.setenv("SKILLGRAFT_CATALOG", "postgresql://db/memory")
    monkeypatch.setenv("SKILLGRAFT_BLOCKS", "s3://bucket/blocks")
    assert catalog_url() == "postgresql://db/memory" and blocks_url() == "s3://bucket/blocks"
    assert catalog_url("sqlite") is None and blocks_url("") is None
    with pytest.raises(ConfigError, match="postgresql://"):
        catalog_url("mysql://user:secret@db/memory")
    with pytest.raises(ConfigError, match="s3:// or file://"):
        blocks_url("/mnt/blocks")


def test_nothing_configured_is_the_sqlite_file_and_the_blocks_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("SKILLGRAFT_CATALOG", raising=False)
    monkeypatch.delenv("SKILLGRAFT_BLOCKS", raising=False)
    store = BlockStore(tmp_path / "home")
    block, _ = store.put(FakeEngine().capture("a manual"), name="m", kind="manual", source="a manual")
    store.close()
    assert sorted(p.name for p in (tmp_path / "home").iterdir()) == ["blocks", "catalog.db", "quarantine"]
    assert (tmp_path / "home" / "blocks" / block.file_name).is_file()


def test_blocks_on_a_shared_mount(tmp_path):
    shared = f"file://{tmp_path / 'mount'}"
    engine = FakeEngine()
    store = BlockStore(tmp_path / "home", blocks=shared)
    block, created = store.put(engine.capture("a manual on the shared mount"), name="m", kind="manual", source="x")
    assert created and (tmp_path / "mount" / block.file_name).is_file()
    assert store.put(engine.capture("a manual on the shared mount"), name="m", kind="manual", source="x")[1] is False

    cached = tmp_path / "home" / "cache" / block.file_name
    cached.write_bytes(b"\0" * block.n_bytes)  # a bad cached copy is only a cache miss
    store.evict(block.sha256)
    assert store.load_state(block).state.sha256 == block.sha256
    assert cached.read_bytes() == (tmp_path / "mount" / block.file_name).read_bytes()

    damaged = bytearray((tmp_path / "mount" / block.file_name).read_bytes())
    damaged[0] ^= 0xFF
    (tmp_path / "mount" / block.file_name).write_bytes(bytes(damaged))
    cached.unlink()
    store.evict(block.sha256)
    with pytest.raises(BlockIntegrityError, match="BLAKE3 mismatch"):
        store.load_state(block)
    assert store.get("m").status == "quarantined"
    assert [p.name.split(".kv")[0] for p in (tmp_path / "mount" / "quarantine").iterdir()] == [block.sha256]
    store.close()


def test_the_host_cache_keeps_within_its_bound(tmp_path):
    engine = FakeEngine()
    storage = ObjectBlocks(f"file://{tmp_path / 'mount'}", tmp_path / "cache", cache_bytes=3000)
    store = BlockStore(tmp_path / "home", blocks=storage.url)
    store.storage = storage
    for i in range(6):
        store.put(engine.capture(f"manual number {i} " * 3), name=f"m{i}", kind="manual", source=str(i))
    cached = list((tmp_path / "cache").glob("*.kv"))
    assert 0 < sum(p.stat().st_size for p in cached) <= 3000 and len(list((tmp_path / "mount").glob("*.kv"))) == 6
    store.close()


def test_an_unclaimed_object_is_left_alone_while_young_then_quarantined(tmp_path):
    import os
    import time

    from skillgraft.store.block_objects import UNCLAIMED_GRACE_S

    store = BlockStore(tmp_path / "home", blocks=f"file://{tmp_path / 'mount'}")
    store.put(FakeEngine().capture("a claimed manual"), name="m", kind="manual", source="x")
    stray = tmp_path / "mount" / ("ab" * 32 + ".kv")
    stray.write_bytes(b"an upload whose deposit never committed")
    assert store.check().ok  # young: maybe a deposit in progress on another host
    old = time.time() - UNCLAIMED_GRACE_S - 60
    os.utime(stray, (old, old))
    report = store.check()
    assert not report.ok and report.problems[0]["problem"] == "object without a catalog row"
    assert store.check(repair=True).repaired and store.check().ok
    assert not stray.exists() and len(list((tmp_path / "mount" / "quarantine").iterdir())) == 1
    store.close()


def test_a_deposit_that_another_process_made_meanwhile_is_returned(fake_memory, monkeypatch):
    first = fake_memory.add_manual("m", "Skill manual: deposited by two writers at once.")
    monkeypatch.setattr(fake_memory, "_named", lambda name: None)  # the other writer's row came after this look-up
    assert fake_memory.add_manual("m", "Skill manual: deposited by two writers at once.") == first
