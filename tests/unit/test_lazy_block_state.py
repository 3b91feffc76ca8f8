"""A routed block's payload is read only where the cells do not hold the block already; a
payload found damaged then is quarantined and the chat is answered plainly, never failed."""

from __future__ import annotations

from skillgraft.core.answer import AnswerOptions
from skillgraft.memory import SkillMemory
from skillgraft.testing import FakeEmbedder, FakeEngine

from .conftest import GIT_QUERY

CHAT = [("user", GIT_QUERY)]  # no system turn of the app's: the captured block leads it, restored
OPTIONS = AnswerOptions(max_tokens=4)


def _counting_reads(store, monkeypatch) -> list:
    reads = []
    read = store.storage.read

    def counted(block, check):
        reads.append(block.id)
        return read(block, check)

    monkeypatch.setattr(store.storage, "read", counted)
    return reads


def test_a_graft_whose_cells_hold_the_block_reads_no_payload(fake_stocked, monkeypatch):
    block = fake_stocked.blocks.get("git-squash")
    first = fake_stocked.answer(CHAT, OPTIONS)
    assert (first.note.decision, first.note.block_id) == ("graft", block.id)
    fake_stocked.store.evict(block.sha256)  # not in the payload cache: a load would read the file
    reads = _counting_reads(fake_stocked.store, monkeypatch)
    again = fake_stocked.answer(CHAT, OPTIONS)
    assert (again.note.decision, again.note.block_id) == ("graft", block.id)
    assert again.text == first.text and reads == []


def test_a_payload_read_when_the_cells_lack_it_is_read_once_and_verified(fake_stocked, monkeypatch):
    block = fake_stocked.blocks.get("git-squash")
    home = fake_stocked.store.home
    fake_stocked.close()
    with SkillMemory(home, engine=FakeEngine(), embedder=FakeEmbedder()) as memory:
        reads = _counting_reads(memory.store, monkeypatch)
        answer = memory.answer(CHAT, OPTIONS)
        assert (answer.note.decision, answer.note.block_id) == ("graft", block.id)
        assert reads == [block.id]


def test_a_payload_found_damaged_at_restore_is_quarantined_and_the_chat_answered_plainly(fake_stocked):
    block = fake_stocked.blocks.get("git-squash")
    home = fake_stocked.store.home
    path = fake_stocked.store.path_of(block)
    fake_stocked.close()
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with SkillMemory(home, engine=FakeEngine(), embedder=FakeEmbedder()) as memory:
        answer = memory.answer(CHAT, OPTIONS)
        assert answer.note.decision == "fallback" and answer.note.block_id == block.id
        assert f"the routed block {block.id} cannot be read" in answer.note.reason
        assert "corrupt" in answer.note.reason and answer.end.completion_tokens > 0
        assert memory.blocks.list("manual", include_quarantined=True)[0].status == "quarantined"
        later = memory.answer(CHAT, OPTIONS)  # its row says so now: refused at planning, answered plainly
        assert later.note.decision in ("fallback", "abstain") and later.end.completion_tokens > 0
