"""The store on fake captures: payloads round-trip, a reopened store routes without re-embedding, check finds and repairs damage."""

from __future__ import annotations

import pytest

from skillgraft.errors import BlockIntegrityError
from skillgraft.memory import SkillMemory
from skillgraft.testing import FakeEmbedder, FakeEngine

from .conftest import GIT_MANUAL, GIT_QUERY


def test_a_stored_state_loads_back_byte_for_byte_and_grafts(fake_memory, fake_engine):
    prefix, turn = fake_engine.chat_split(GIT_MANUAL, GIT_QUERY)
    state = fake_engine.capture(fake_engine.tokenize(prefix))
    block, created = fake_memory.store.put(state, name="git", kind="manual", source=GIT_MANUAL)
    assert created and block.id == state.sha256[:16] and block.n_bytes == state.n_bytes
    assert fake_memory.store.put(state, name="git", kind="manual", source=GIT_MANUAL) == (block, False)
    loaded = fake_memory.store.load_state(block).state
    assert (loaded.tokens, loaded.payload, loaded.sha256) == (state.tokens, state.payload, state.sha256)
    assert loaded.fingerprint == fake_engine.fingerprint
    query = fake_engine.tokenize(turn, add_bos=False)
    grafted = fake_engine.graft(loaded, query, block.id).tobytes()
    fake_engine.prefill([*state.tokens, *query])
    assert grafted == fake_engine.logits_bytes()


def test_a_reopened_store_routes_without_embedding_its_keys_again(fake_stocked, fake_engine):
    home, routed = fake_stocked.store.home, fake_stocked.recall(GIT_QUERY).block.id
    fake_stocked.close()
    embedder = FakeEmbedder()
    with SkillMemory(home, engine=fake_engine, embedder=embedder) as mem:
        assert mem.recall(GIT_QUERY).block.id == routed
        assert embedder.encoded == 1  # the query only
        assert [b.name for b in mem.blocks.list("manual")] == ["git-squash", "sourdough"]


def test_check_reports_a_corrupt_file_and_repair_recaptures_it(fake_stocked):
    assert fake_stocked.blocks.check()["ok"]
    block = fake_stocked.blocks.get("git-squash")
    path = fake_stocked.store.path_of(block)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    report = fake_stocked.blocks.check()
    assert not report["ok"] and [p["block_id"] for p in report["problems"]] == [block.id]
    repaired = fake_stocked.blocks.check(repair=True)
    assert [r["block_id"] for r in repaired["repaired"]] == [block.id] and not repaired["problems"]
    assert fake_stocked.blocks.check()["ok"]
    assert fake_stocked.store.load_state(block).state.sha256 == block.sha256


def test_a_missing_file_is_refused_at_load_and_recaptured_by_repair(fake_stocked):
    block = fake_stocked.blocks.get("sourdough")
    fake_stocked.store.path_of(block).unlink()
    fake_stocked.store.evict(block.sha256)
    with pytest.raises(BlockIntegrityError, match="missing"):
        fake_stocked.store.load_state(block)
    assert fake_stocked.blocks.check(repair=True)["repaired"]
    assert fake_stocked.store.path_of(block).read_bytes() == fake_stocked.store.load_state(block).state.payload


def test_repair_never_recaptures_a_block_of_another_runtime(fake_stocked, fake_embedder):
    home = fake_stocked.store.home
    block = fake_stocked.blocks.get("git-squash")
    fake_stocked.store.path_of(block).unlink()
    fake_stocked.close()
    other = FakeEngine("another-model")
    with SkillMemory(home, engine=other, embedder=fake_embedder) as mem:
        report = mem.blocks.check(repair=True)
        assert not report["repaired"] and [p["block_id"] for p in report["problems"]] == [block.id]
        assert other.calls["capture"] == 0


def test_the_runtimes_of_the_blocks_follow_the_catalog(fake_memory):
    store = fake_memory.store
    assert store.fingerprint_ids() == set()
    block = fake_memory.add_manual("git-squash", "Skill manual: squash commits with git rebase -i HEAD~N.")
    assert store.fingerprint_ids() == {block.fingerprint_id}
    store.quarantine(store.get(block.id), "a test")
    assert store.fingerprint_ids() == set()
