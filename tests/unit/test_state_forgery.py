"""Derived states that cannot be forged nor read by others: a state is used only when its
payload has the digest recorded outside its file (the folder's index, a shared store's row),
files are the owner's alone, and deleting a block deletes the states kept behind it."""

from __future__ import annotations

import json
import logging
import stat
import struct

import pytest

from skillgraft.core.states import KVState, sha256_hex
from skillgraft.kv.prefixes import PrefixCache
from skillgraft.store.derived_states import DerivedStates, decode_state, encode_state
from skillgraft.testing import FakeEngine

from .test_prefix_reuse import OPTIONS, QUESTIONS, chat, fresh_answer, open_memory
from .test_shared_derived import capture_on_a, objects, open_host, published


def forged(data: bytes, engine: FakeEngine) -> bytes:
    """The file of ``data``'s state with another prompt's cells under its token ids, its own
    header made consistent with them (as whoever can write the folder can do)."""
    state = decode_state(data)
    (size,) = struct.unpack("<I", data[8:12])
    parent = json.loads(data[12:12 + size])["parent"]
    other = engine.capture([t % 200 + 3 for t in state.tokens[::-1]])
    return encode_state(KVState(state.tokens, other.payload, sha256_hex(other.payload), state.fingerprint), parent)


def payload_swapped(data: bytes) -> bytes:
    """The file ``data`` with the header the index recorded and another prompt's cells after it."""
    state = decode_state(data)
    other = FakeEngine().capture([t % 200 + 3 for t in state.tokens[::-1]])
    return data[: len(data) - state.n_bytes] + other.payload


@pytest.mark.parametrize("swap", ["file", "payload"])
def test_a_state_swapped_after_a_restart_is_refused_and_the_answer_is_a_prefills(tmp_path, caplog, swap):
    """A file forged whole is refused when its state is found (its header), a payload swapped
    under the recorded header where it is read (restored): either way the prompt is prefilled."""
    home = tmp_path / "store"
    with open_memory(home) as memory:
        memory.answer(chat(QUESTIONS[2]), OPTIONS)
        memory.answer(chat(QUESTIONS[3]), OPTIONS)
    (path,) = list((home / "derived").rglob("*.state"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((path.parent / "index.log").stat().st_mode) == 0o600
    data = path.read_bytes()
    path.write_bytes(forged(data, FakeEngine()) if swap == "file" else payload_swapped(data))
    with caplog.at_level(logging.WARNING), open_memory(home) as restarted:
        answer = restarted.answer(chat(QUESTIONS[4]), OPTIONS)
        assert answer.note.reused_from != "derived" and "not what the index recorded" in caplog.text
        assert answer.text == fresh_answer(tmp_path, chat(QUESTIONS[4])).text
    written = path.read_bytes() if path.exists() else b""  # deleted, or kept again from the answer's own cells
    assert written != forged(data, FakeEngine()) and written != payload_swapped(data)
    assert not written or decode_state(written).sha256 == sha256_hex(decode_state(written).payload)


def test_a_state_the_index_does_not_record_is_never_used(tmp_path, caplog):
    engine = FakeEngine()
    folder = tmp_path / "derived"
    cache = PrefixCache(DerivedStates(folder, engine.fingerprint), engine.fingerprint.id, engine.cut_state)
    cache.keep(engine.capture(list(range(5, 100))))
    (folder / "index.log").write_text("")  # the record gone: a file alone proves nothing
    with caplog.at_level(logging.WARNING, logger="skillgraft.store"):
        store = DerivedStates(folder, engine.fingerprint)
    assert len(store) == 0 and not list(folder.glob("*.state")) and "does not record" in caplog.text


def test_a_published_state_swapped_in_the_bucket_is_refused(tmp_path, caplog):
    row = capture_on_a(tmp_path)
    path = tmp_path / "bucket" / "derived" / f"{row['key']}.state"
    data = forged(path.read_bytes(), FakeEngine())
    assert len(data) == row["n_bytes"]  # the same size: only the row's digest tells
    path.write_bytes(data)
    with caplog.at_level(logging.WARNING, logger="skillgraft.store"), open_host(tmp_path, "b") as b:
        answer = b.answer(chat(QUESTIONS[4]), OPTIONS)
        assert answer.note.reused_from != "derived" and "not the one its row recorded" in caplog.text
        assert answer.text == fresh_answer(tmp_path, chat(QUESTIONS[4])).text
    assert published(tmp_path) == [] and objects(tmp_path) == []


def test_deleting_a_block_deletes_the_states_kept_behind_it_here_and_published(tmp_path):
    row = capture_on_a(tmp_path)
    with open_host(tmp_path, "b") as b:
        b.answer(chat(QUESTIONS[4]), OPTIONS)  # b keeps its own copy
        assert list((tmp_path / "b" / "derived").rglob("*.state"))
        b.blocks.delete("git-squash")
        assert b.states.cache.store.entries() == [] and not list((tmp_path / "b" / "derived").rglob("*.state"))
    assert published(tmp_path) == [] and objects(tmp_path) == [] and row
    with open_memory(tmp_path / "own") as memory:
        memory.answer(chat(QUESTIONS[2]), OPTIONS)
        memory.answer(chat(QUESTIONS[3]), OPTIONS)
        memory.states.flush()
        assert len(memory.states.cache.store) == 1
        memory.blocks.delete("git-squash")
        assert len(memory.states.cache.store) == 0 and not list((tmp_path / "own" / "derived").rglob("*.state"))


def test_the_folders_made_for_blocks_are_the_owners_alone(tmp_path):
    with open_memory(tmp_path / "store") as memory:
        folders = [memory.store.storage.folder, memory.store.storage.quarantine_dir]
    assert [stat.S_IMODE(folder.stat().st_mode) for folder in folders] == [0o700, 0o700]



def test_a_home_the_store_creates_is_its_owners_alone(tmp_path):
    """The catalog beside the states (skills' texts, verified answers, corrections' queries) and
    every namespace's folder are inside it: another local user reads none of them."""
    with open_memory(tmp_path / "new" / "store") as memory:
        home = memory.store.home
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
