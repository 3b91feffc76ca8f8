"""Ledger rows: fixed columns, JSON text for the nested fields, whatever a caller passes."""

import json

import pytest

from skillgraft.store.ledger import LedgerEvent


def test_a_ledger_row_has_the_fixed_columns_only():
    row = LedgerEvent("generate", decision="graft", block_id="b1", score=0.5, timings={"total_s": 1.5},
                      detail={"gate": {"fell_back": False}}).row("2026-01-01T00:00:00Z")
    assert set(row) == {"at", "event", "decision", "block_id", "query_sha256", "score", "threshold",
                        "decoded_tokens", "prefill_tokens_avoided", "timings", "detail"}
    assert json.loads(row["timings"]) == {"total_s": 1.5} and json.loads(row["detail"])["gate"]["fell_back"] is False


def test_no_keyword_becomes_a_column():
    with pytest.raises(TypeError):
        LedgerEvent("recall", **{"decision) VALUES (1); DROP TABLE blocks; --": "x"})


def test_ledger_rows_round_trip_through_a_store(tmp_path):
    from skillgraft.store.block_store import BlockStore

    store = BlockStore(tmp_path / "store")
    try:
        store.log(LedgerEvent("recall", decision="abstain", score=0.12, threshold=0.3))
        (row,) = store.ledger(1)
    finally:
        store.close()
    assert row["event"] == "recall" and row["decision"] == "abstain" and row["threshold"] == 0.3


def test_typed_reads_filter_count_and_survive_a_damaged_row(tmp_path):
    from skillgraft.store.block_store import BlockStore

    store = BlockStore(tmp_path / "store")
    try:
        store.log(LedgerEvent("generate", decision="graft", block_id="b1", timings={"total_s": 0.5}, prefill_tokens_avoided=90))
        store.log(LedgerEvent("generate", decision="exact", block_id="b1"))
        store.log(LedgerEvent("generate", decision="fallback", block_id="b1"))  # tried, not used
        store.log(LedgerEvent("recall", decision="graft", block_id="b2"))
        store.log(LedgerEvent("generate", decision="graft", block_id="b2", timings={"total_s": "fast"}))
        with store.catalog.write() as conn:
            conn.execute("UPDATE ledger SET detail = '{not json' WHERE id = 1")
        newest_b1 = store.ledger_rows(block_id="b1")
        assert [r.decision for r in newest_b1] == ["fallback", "exact", "graft"]
        assert newest_b1[-1].detail == {} and newest_b1[-1].total_s == 0.5 and newest_b1[-1].prefill_tokens_avoided == 90
        assert [r.event for r in store.ledger_rows(event="recall")] == ["recall"]
        assert store.ledger_rows(event="generate", limit=1)[0].total_s is None  # a non-number is no time
        uses = store.block_uses()
        assert (uses["b1"].uses, uses["b2"].uses) == (2, 1)
        assert uses["b1"].last_use == newest_b1[1].at
        assert store.ledger_counts() == {"generate": 4, "recall": 1}
    finally:
        store.close()


def test_a_manual_deposit_and_a_skill_import_each_write_a_ledger_row(fake_memory, tmp_path):
    from .conftest import GIT_MANUAL
    from .skill_folders import pdf_skill

    captured = fake_memory.add_manual("git-squash", GIT_MANUAL)
    text = fake_memory.add_manual("notes", "Skill manual: release notes, one line per change.", capture=False)
    fake_memory.add_manual("git-squash", GIT_MANUAL)  # the same manual again: no deposit
    fake_memory.skills.import_folders([pdf_skill(tmp_path / "skills")])
    deposits = fake_memory.store.ledger_rows(event="deposit")
    assert [(row.decision, row.block_id, row.detail["stored"]) for row in reversed(deposits)] == [
        ("manual", captured.id, "captured"), ("manual", text.id, "text")]
    (imported,) = fake_memory.store.ledger_rows(event="import")
    assert imported.decision == "skill" and imported.detail["skill"] == "pdf" and imported.detail["version"] == 1
    assert imported.detail["parts"] == len(fake_memory.skills.get("pdf").parts)


def test_a_ledger_row_does_not_wait_for_the_disk_and_every_other_write_does(tmp_path):
    from skillgraft.store.block_store import BlockStore

    store = BlockStore(tmp_path / "store")
    conn, seen = store.catalog.db.conn, []
    try:
        with store.catalog.write(relaxed=True) as writer:  # what a ledger row is written in
            seen.append(writer.execute("PRAGMA synchronous").fetchone()[0])
        with store.catalog.write() as writer:
            seen.append(writer.execute("PRAGMA synchronous").fetchone()[0])
        store.log(LedgerEvent("recall", decision="abstain"))
        seen.append(conn.execute("PRAGMA synchronous").fetchone()[0])
        with pytest.raises(ZeroDivisionError), store.catalog.write(relaxed=True):
            1 / 0
        seen.append(conn.execute("PRAGMA synchronous").fetchone()[0])
        assert len(store.ledger(10)) == 1
    finally:
        store.close()
    assert seen == [1, 2, 2, 2]  # NORMAL inside a relaxed write, FULL everywhere else, after a failure too
