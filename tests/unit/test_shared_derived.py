"""Derived states on the hosts of a shared store, on the fakes: two homes sharing one SQLite
catalog file and one folder of blocks (``file://``). A state captured on one host is restored on
the other; a damaged or forged one is ignored; the published states keep within their budget;
a failing shared tier only costs a prefill."""

from __future__ import annotations

import logging
import time

import numpy as np

from skillgraft.kv.prefixes import chain_keys, state_key
from skillgraft.errors import StoreError
from skillgraft.memory import SkillMemory
from skillgraft.store import block_objects
from skillgraft.store.catalog import SqliteCatalog
from skillgraft.store.derived_states import DerivedStates, encode_state
from skillgraft.store.shared_derived import SharedDerivedStates
from skillgraft.testing import FakeEmbedder, FakeEngine

from .conftest import GIT_MANUAL
from .test_prefix_reuse import OPTIONS, QUESTIONS, chat, fresh_answer


def open_host(tmp_path, name: str) -> SkillMemory:
    memory = SkillMemory(tmp_path / name, engine=FakeEngine(), embedder=FakeEmbedder(),
                         catalog=SqliteCatalog(tmp_path / "shared.db"), blocks=f"file://{tmp_path / 'bucket'}")
    if not memory.blocks.list():
        memory.add_manual("git-squash", GIT_MANUAL, examples=QUESTIONS[:2])
    return memory


def published(tmp_path) -> list:
    catalog = SqliteCatalog(tmp_path / "shared.db")
    rows = catalog.query("SELECT key, n_bytes, last_used FROM derived_states ORDER BY last_used")
    catalog.close()
    return rows


def objects(tmp_path) -> list:
    folder = tmp_path / "bucket" / "derived"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def capture_on_a(tmp_path) -> dict:
    with open_host(tmp_path, "a") as a:
        assert isinstance(a.states.cache.store, SharedDerivedStates)
        a.answer(chat(QUESTIONS[2]), OPTIONS)
        a.answer(chat(QUESTIONS[3]), OPTIONS)  # the two part ways after the agent's prefix: captured, published
    (row,) = published(tmp_path)
    assert objects(tmp_path) == [f"{row['key']}.state"]
    return row


def test_a_state_captured_on_one_host_is_restored_on_another(tmp_path, monkeypatch):
    row = capture_on_a(tmp_path)
    with open_host(tmp_path, "b") as b:
        third = b.answer(chat(QUESTIONS[4]), OPTIONS)
        assert third.note.reused_from == "derived" and third.note.cache_n > 100
        assert third.text == fresh_answer(tmp_path, chat(QUESTIONS[4])).text
        assert [p.name for p in (tmp_path / "b" / "derived").rglob("*.state")] == [f"{row['key']}.state"]
        assert published(tmp_path)[0]["last_used"] > row["last_used"]  # its use is shared too
        monkeypatch.setattr(block_objects, "UNCLAIMED_GRACE_S", 0.0)
        report = b.blocks.check()
        assert report["ok"], report  # a published state is no stray block


def test_a_damaged_or_forged_published_state_is_ignored_and_removed(tmp_path, caplog):
    row = capture_on_a(tmp_path)
    path = tmp_path / "bucket" / "derived" / f"{row['key']}.state"
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="skillgraft.store"), open_host(tmp_path, "b") as b:
        answer = b.answer(chat(QUESTIONS[4]), OPTIONS)
        assert answer.note.reused_from != "derived" and "damaged" in caplog.text
        assert answer.text == fresh_answer(tmp_path, chat(QUESTIONS[4])).text
    assert published(tmp_path) == [] and objects(tmp_path) == []

    engine = FakeEngine()
    catalog = SqliteCatalog(tmp_path / "shared.db")
    tokens = list(range(5, 200))
    with catalog.write() as conn:  # rows whose tokens are not their key's, or absurd: never used
        for key, ids, n_bytes in ((state_key(engine.fingerprint.id, tokens[:-1]), tokens, 10),
                                  ("../../etc/passwd", tokens, 10), (state_key(engine.fingerprint.id, tokens), tokens, -1)):
            conn.execute("INSERT INTO derived_states (key, fingerprint_id, n_tokens, tokens, n_bytes, sha256, created_at,"
                         " last_used) VALUES (?, ?, ?, ?, ?, ?, 'x', 'x')",
                         [key, engine.fingerprint.id, len(ids), np.asarray(ids, "<i4").tobytes(), n_bytes, "0" * 64])
        forged = state_key(engine.fingerprint.id, tokens[:-1])  # key rows that lead a prompt to it: still refused
        conn.executemany("INSERT INTO derived_keys (block_key, state_key, fingerprint_id, scope, depth) VALUES (?, ?, ?, '', ?)",
                         [[block.hex(), forged, engine.fingerprint.id, depth]
                          for depth, block in enumerate(chain_keys(engine.fingerprint.id, tokens), 1)])
    with open_host(tmp_path, "c") as c:
        assert c.states.cache.lookup([*tokens, *range(300, 320)]) is None
        assert c.states.cache.store.entries() == []
        assert catalog.query("SELECT key FROM derived_states WHERE key = ?", [forged])  # never learned, never fetched
    catalog.close()


def spy_queries(memory: SkillMemory) -> list:
    """The statements ``memory``'s catalog is sent from now on."""
    sent, query = [], memory.store.catalog.query

    def spy(sql, params=()):
        sent.append(sql)
        return query(sql, params)

    memory.store.catalog.query = spy
    return sent


def test_a_state_published_on_one_host_is_found_on_the_next_request_of_another(tmp_path):
    with open_host(tmp_path, "a") as a, open_host(tmp_path, "b") as b:
        sent = spy_queries(b)
        first = b.answer(chat(QUESTIONS[4]), OPTIONS)  # nothing published yet: found nothing
        assert first.note.reused_from != "derived" and published(tmp_path) == []
        a.answer(chat(QUESTIONS[2]), OPTIONS)
        a.answer(chat(QUESTIONS[3]), OPTIONS)
        assert a.states.flush() == 1  # published now
        b.engine.reset()
        second = b.answer(chat(QUESTIONS[0]), OPTIONS)  # no wait: found by the prompt's keys
        assert second.note.reused_from == "derived" and second.note.cache_n > 100
        assert second.text == fresh_answer(tmp_path, chat(QUESTIONS[0])).text
        reads = [sql for sql in sent if "derived_states" in sql]
        # one keyed lookup a request, no listing (b's own first state, published when its cells
        # went, is checked by its key)
        lookups = [sql for sql in reads if "derived_keys" in sql]
        assert len(lookups) == 2 and all(sql in lookups or "WHERE key = ?" in sql for sql in reads)
        sent.clear()
        b.engine.reset()
        third = b.answer(chat(QUESTIONS[1]), OPTIONS)  # kept on this host now; asked for longer ones only
        assert third.note.reused_from == "derived" and len([sql for sql in sent if "derived_states" in sql]) == 1


def test_the_migration_keys_the_rows_published_before_it(tmp_path):
    row = capture_on_a(tmp_path)
    catalog = SqliteCatalog(tmp_path / "shared.db")
    held = catalog.query("SELECT block_key, state_key, depth FROM derived_keys ORDER BY depth")
    (n_tokens,) = [r["n_tokens"] for r in catalog.query("SELECT n_tokens FROM derived_states")]
    assert [r["depth"] for r in held] == list(range(1, n_tokens // 16 + 1)) and {r["state_key"] for r in held} == {row["key"]}
    engine = FakeEngine()
    with catalog.write() as conn:  # as before the migration, with one row whose ids are not its key's
        conn.execute("DROP TABLE derived_keys")
        conn.execute("DELETE FROM _migrations WHERE name = 'm020_create_derived_keys'")
        conn.execute("INSERT INTO derived_states (key, fingerprint_id, n_tokens, tokens, n_bytes, sha256, created_at,"
                     " last_used) VALUES (?, ?, 17, ?, 10, ?, 'x', 'x')",
                     [state_key(engine.fingerprint.id, [1] * 16), engine.fingerprint.id,
                      np.asarray([1] * 17, "<i4").tobytes(), "0" * 64])
    catalog.close()
    catalog = SqliteCatalog(tmp_path / "shared.db")  # migrated again
    assert catalog.query("SELECT block_key, state_key, depth FROM derived_keys ORDER BY depth") == held
    catalog.close()
    with open_host(tmp_path, "b") as b:
        assert b.answer(chat(QUESTIONS[4]), OPTIONS).note.reused_from == "derived"


def test_the_published_states_keep_within_their_budget(tmp_path):
    engine = FakeEngine()
    states = [engine.capture([7, *range(10 + i, 200 + i)]) for i in range(5)]
    with open_host(tmp_path, "a") as a:
        with a.store.catalog.write() as conn:  # a row of no sense at the top: removed, and evicts nothing else
            conn.execute("INSERT INTO derived_states (key, fingerprint_id, n_tokens, tokens, n_bytes, created_at, last_used)"
                         " VALUES ('junk', 'x', 1, x'00000000', -5, 'x', '9999')")
        local = DerivedStates(tmp_path / "a" / "own", engine.fingerprint)
        one = max(len(encode_state(s)) for s in states)
        shared = SharedDerivedStates(local, a.store.catalog, a.store.storage, max_bytes=one * 3)
        for state in states:
            shared.put(state_key(engine.fingerprint.id, state.tokens), state)
            time.sleep(0.002)  # uses a millisecond apart
    rows = published(tmp_path)
    assert len(rows) == 3 and sum(r["n_bytes"] for r in rows) <= one * 3
    kept = [state_key(engine.fingerprint.id, s.tokens) for s in states[2:]]
    assert sorted(r["key"] for r in rows) == sorted(kept)  # the oldest went first: rows and objects
    assert objects(tmp_path) == sorted(f"{k}.state" for k in kept)
    catalog = SqliteCatalog(tmp_path / "shared.db")
    keyed = catalog.query("SELECT state_key, count(*) AS n FROM derived_keys GROUP BY state_key ORDER BY state_key")
    catalog.close()
    assert keyed == [{"state_key": k, "n": 191 // 16} for k in sorted(kept)]  # and their key rows with them


def test_a_failing_shared_tier_costs_only_a_prefill(tmp_path, caplog):
    capture_on_a(tmp_path)
    with caplog.at_level(logging.WARNING, logger="skillgraft.store"), open_host(tmp_path, "b") as b:
        calls = []

        def down(*args):
            calls.append(args)
            raise StoreError("the bucket is down")

        b.store.storage.get_derived = down
        b.store.storage.put_derived = down
        answer = b.answer(chat(QUESTIONS[4]), OPTIONS)
        assert answer.note.reused_from != "derived" and "the bucket is down" in caplog.text
        assert answer.text == fresh_answer(tmp_path, chat(QUESTIONS[4])).text
        again = b.answer(chat(QUESTIONS[0]), OPTIONS)  # the shared tier rests: no wait on the bucket
        assert len(calls) == 1 and again.text == fresh_answer(tmp_path, chat(QUESTIONS[0])).text


def test_a_local_store_publishes_nothing(tmp_path):
    with SkillMemory(tmp_path / "home", engine=FakeEngine(), embedder=FakeEmbedder(), catalog="sqlite", blocks="") as memory:
        assert not memory.store.shared and isinstance(memory.states.cache.store, DerivedStates)


def test_a_hosts_use_of_its_own_copy_counts_for_the_shared_order(tmp_path, monkeypatch):
    from skillgraft.store import shared_derived

    with open_host(tmp_path, "a") as a:
        a.answer(chat(QUESTIONS[2]), OPTIONS)
        a.answer(chat(QUESTIONS[3]), OPTIONS)
        a.states.flush()
        (before,) = published(tmp_path)
        a.answer(chat(QUESTIONS[4]), OPTIONS)  # within TOUCH_EVERY_S of its publication: no catalog write
        assert published(tmp_path) == [before]
        monkeypatch.setattr(shared_derived, "TOUCH_EVERY_S", 0.0)
        time.sleep(0.002)
        a.engine.reset()  # the context holds nothing: the prefix comes from the kept state
        assert a.answer(chat(QUESTIONS[0]), OPTIONS).note.reused_from == "derived"
        (after,) = published(tmp_path)
        assert after["key"] == before["key"] and after["last_used"] > before["last_used"]
