"""A block's routing keys of a kind are found by an index of both, never by scanning the catalog:
with the block's and the encoder's indexes alone SQLite's planner took the encoder's (every key
has the same one), so each key an import stored read every key, and imports slowed as the
catalog grew (0.47 s a skill at 3,000 skills, 0.16 s with the index)."""

import sqlite3

from skillgraft.memory import SkillMemory
from skillgraft.testing import FakeEmbedder, FakeEngine

# The statements the store runs when it stores or replaces a block's keys (store/edits.py).
LOOKUPS = (
    ("SELECT 1 FROM routing_keys WHERE block_id = ? AND kind = ? AND text = ? AND embedder = ?", ("b", "k", "t", "e")),
    ("DELETE FROM routing_keys WHERE block_id = ? AND kind = ?", ("b", "k")),
)


def _plans(path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [" ".join(str(row[-1]) for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", args))
                for sql, args in LOOKUPS]


def _store(home) -> None:
    with SkillMemory(home, engine=FakeEngine(), embedder=FakeEmbedder()) as memory:
        for i in range(3):
            memory.add_manual(f"manual-{i}", f"How to do task {i}. Step one of it. Step two of it.", capture=False)


def test_a_blocks_keys_of_a_kind_are_looked_up_by_the_block_and_kind_index(tmp_path):
    _store(tmp_path / "store")
    for plan in _plans(tmp_path / "store" / "catalog.db"):
        assert "idx_routing_keys_block_id_kind" in plan, plan


def test_a_store_made_before_the_index_gets_it_when_opened(tmp_path):
    home = tmp_path / "store"
    _store(home)
    with sqlite3.connect(home / "catalog.db") as conn:  # as a store made by the release before it
        conn.execute("DROP INDEX idx_routing_keys_block_id_kind")
        conn.execute("DELETE FROM _migrations WHERE name = 'm025_index_routing_keys_by_block_and_kind'")
    assert all("idx_routing_keys_embedder" in plan for plan in _plans(home / "catalog.db")[:1])
    with SkillMemory(home, engine=FakeEngine(), embedder=FakeEmbedder()) as memory:
        assert len(memory.store.routing_keys()) > 3  # nothing lost
    assert all("idx_routing_keys_block_id_kind" in plan for plan in _plans(home / "catalog.db"))
