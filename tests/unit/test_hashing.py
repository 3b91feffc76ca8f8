"""BLAKE3 on the read path: new blocks record it, old SHA-256-only blocks stay valid, damage is caught either way."""

from __future__ import annotations

import hashlib
import os

import pytest

from skillgraft.errors import BlockIntegrityError
from skillgraft.core.hashing import blake3_hex, payload_problem, reuse_freed_payload_memory
from skillgraft.memory import SkillMemory

from .conftest import GIT_QUERY


def _flip_last_byte(path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_new_block_records_the_blake3_of_its_payload(fake_stocked):
    block = fake_stocked.blocks.get("git-squash")
    payload = fake_stocked.store.path_of(block).read_bytes()
    assert block.blake3 == blake3_hex(payload) and block.blake3 != block.sha256
    assert fake_stocked.store.load_state(block).state.payload == payload


def test_a_flipped_byte_is_caught_by_blake3_before_a_graft(fake_stocked, fake_engine):
    block = fake_stocked.blocks.get("git-squash")
    _flip_last_byte(fake_stocked.store.path_of(block))
    fake_stocked.store.evict(block.sha256)
    restores = fake_engine.calls["restore"]
    with pytest.raises(BlockIntegrityError, match="BLAKE3 mismatch"):
        fake_stocked.store.load_state(block)
    assert fake_engine.calls["restore"] == restores
    assert not fake_stocked.store.path_of(block).exists(), "the corrupt file went to quarantine/"


def test_a_block_stored_before_the_migration_is_verified_by_its_sha256(fake_stocked):
    block = fake_stocked.blocks.get("git-squash")
    fake_stocked.store.db.execute("UPDATE blocks SET blake3 = NULL")
    fake_stocked.store.db.conn.commit()
    fake_stocked.store.evict(block.sha256)
    old = fake_stocked.blocks.get("git-squash")
    assert old.blake3 is None
    assert fake_stocked.store.load_state(old).state.payload == fake_stocked.store.path_of(old).read_bytes()
    assert fake_stocked.blocks.check()["ok"] and fake_stocked.recall(GIT_QUERY).block.id == block.id
    _flip_last_byte(fake_stocked.store.path_of(old))
    fake_stocked.store.evict(old.sha256)
    with pytest.raises(BlockIntegrityError, match="SHA-256 mismatch"):
        fake_stocked.store.load_state(old)


def test_a_malformed_blake3_in_the_catalog_is_an_inconsistent_row(fake_stocked):
    block = fake_stocked.blocks.get("sourdough")
    fake_stocked.store.db.execute("UPDATE blocks SET blake3 = 'not-a-digest' WHERE id = ?", [block.id])
    fake_stocked.store.db.conn.commit()
    fake_stocked.store.evict(block.sha256)
    with pytest.raises(BlockIntegrityError, match="not a BLAKE3 hex digest"):
        fake_stocked.store.load_state(fake_stocked.blocks.get("sourdough"))
    assert not fake_stocked.blocks.check()["ok"]


def test_a_wrong_but_wellformed_blake3_refuses_the_block(fake_stocked):
    block = fake_stocked.blocks.get("sourdough")
    fake_stocked.store.db.execute("UPDATE blocks SET blake3 = ? WHERE id = ?", [blake3_hex(b"other"), block.id])
    fake_stocked.store.db.conn.commit()
    fake_stocked.store.evict(block.sha256)
    with pytest.raises(BlockIntegrityError, match="BLAKE3 mismatch"):
        fake_stocked.store.load_state(fake_stocked.blocks.get("sourdough"))


def test_payload_problem_names_size_and_digest():
    payload = os.urandom(3000)
    sha, b3 = hashlib.sha256(payload).hexdigest(), blake3_hex(payload)
    assert payload_problem(payload, 3000, sha, b3) is None and payload_problem(payload, 3000, sha) is None
    assert payload_problem(payload[:-1], 3000, sha, b3) == "2999 bytes, expected 3000"
    assert payload_problem(payload, 3000, "0" * 64) == "SHA-256 mismatch"
    assert payload_problem(payload, 3000, sha, "0" * 64) == "BLAKE3 mismatch"


def test_a_new_memory_on_an_old_catalog_migrates_it(tmp_path, fake_engine, fake_embedder):
    with SkillMemory(tmp_path, engine=fake_engine, embedder=fake_embedder) as memory:
        names = {row[0] for row in memory.store.db.execute("SELECT name FROM _migrations").fetchall()}
        columns = {row[1] for row in memory.store.db.execute("PRAGMA table_info(blocks)").fetchall()}
    assert "m009_record_blake3" in names and "blake3" in columns


def test_heap_tuning_applies_once_and_can_be_turned_off(monkeypatch):
    import skillgraft.core.hashing as hashing

    first = reuse_freed_payload_memory()
    assert reuse_freed_payload_memory() is first
    monkeypatch.setattr(hashing, "_heap_tuned", None)
    monkeypatch.setenv("SKILLGRAFT_HEAP_TUNING", "0")
    assert reuse_freed_payload_memory() is False
