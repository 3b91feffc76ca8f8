"""One AnswerContext over a KVBackend: the context decides, the backend is told before it drops
cells, pending captures are the context's own, and a payload is a StateRef."""

from __future__ import annotations

import threading

import pytest

from skillgraft.core.states import BytesRef, FileRef, KVState
from skillgraft.errors import BlockIntegrityError
from skillgraft.kv.context import KEEPER, AnswerContext
from skillgraft.kv.context import PendingCapture
from skillgraft.kv.prefixes import PrefixCache
from skillgraft.store.derived_states import DerivedStates
from skillgraft.testing import FakeEngine
from skillgraft.core.sampling import SamplingOptions

from .test_prefix_reuse import AGENT


def _prompt(engine, question):
    return engine.tokenize(engine.chat_prompt([("system", AGENT), ("user", question)]))


def test_an_engine_has_one_context_that_holds_its_pending_captures(tmp_path):
    engine = FakeEngine()
    assert engine.context is engine.context and isinstance(engine.context, AnswerContext)
    assert not hasattr(engine, "_pending_captures") and "_pending_captures" not in vars(engine)
    cache = PrefixCache(DerivedStates(tmp_path, engine.fingerprint), engine.fingerprint.id, engine.cut_state)
    for question in ("how do I squash commits?", "what is a rebase?"):
        with engine.answer_slot(cache) as slot:
            slot.prefill(_prompt(engine, question))
            list(slot.generate(SamplingOptions(2)))
    assert len(engine.context.pending) == 1 and len(cache.store) == 0  # the cells still hold the prefix
    engine.prefill([1, 2, 3])  # the engine drops its cells: it tells its context first
    KEEPER.drain()
    assert len(engine.context.pending) == 0 and len(cache.store) == 1


def test_a_state_whose_cells_go_is_kept_off_the_answers_path(tmp_path):
    """The cells are saved before they go; hashing and writing the state wait for no prompt."""
    engine = FakeEngine()
    cache = PrefixCache(DerivedStates(tmp_path, engine.fingerprint), engine.fingerprint.id, engine.cut_state)
    for question in ("how do I squash commits?", "what is a rebase?"):
        with engine.answer_slot(cache) as slot:
            slot.prefill(_prompt(engine, question))
            list(slot.generate(SamplingOptions(2)))
    busy, release = threading.Event(), threading.Event()
    assert KEEPER.submit(lambda: busy.set() or release.wait(10))  # the keeper is busy elsewhere
    try:
        assert busy.wait(10)
        engine.prefill([1, 2, 3])  # returns with the state handed over, not yet kept
        assert len(engine.context.pending) == 0 and len(cache.store) == 0
    finally:
        release.set()
    KEEPER.drain()
    assert len(cache.store) == 1
    with engine.answer_slot(cache) as slot:  # and it is what the next prompt finds
        slot.prefill(_prompt(engine, "and a merge?"))
        assert slot.reused_from == "derived"


def test_a_pending_capture_the_cells_no_longer_hold_is_dropped(tmp_path):
    engine = FakeEngine()
    cache = PrefixCache(DerivedStates(tmp_path, engine.fingerprint), engine.fingerprint.id, engine.cut_state)
    engine.prefill(list(range(10, 200)))
    engine.context.pending.add(PendingCapture(tuple(range(100)), "", cache))  # not what the cells hold
    assert engine.settle_derived() == 0 and len(cache.store) == 0 and len(engine.context.pending) == 0


def test_nothing_prefilled_is_an_input_error():
    from skillgraft.errors import InputError

    with FakeEngine().answer_slot() as slot, pytest.raises(InputError):
        slot.generate(SamplingOptions(1))


def test_a_payload_is_a_state_ref_in_memory_or_in_a_file(tmp_path):
    engine = FakeEngine()
    state = engine.capture([1, 2, 3, 4])
    assert isinstance(state.ref, BytesRef) and state.n_bytes == len(state.payload)
    path = tmp_path / "payload"
    path.write_bytes(b"head" + state.payload)
    on_disk = KVState(state.tokens, FileRef(path, 4, state.n_bytes), state.sha256, state.fingerprint)
    assert on_disk.n_bytes == state.n_bytes and on_disk.payload == state.payload
    engine.restore(on_disk)  # an engine reads it when it restores it
    assert engine.context_tokens == [1, 2, 3, 4]
    checked = KVState(state.tokens, FileRef(path, 4, state.n_bytes, state.sha256), state.sha256, state.fingerprint)
    assert checked.payload == state.payload
    path.write_bytes(b"head" + bytes(state.n_bytes))  # swapped: the same size, other bytes
    assert len(on_disk.payload) == state.n_bytes
    with pytest.raises(BlockIntegrityError, match="SHA-256"):
        checked.payload
    path.write_bytes(b"head")
    with pytest.raises(BlockIntegrityError, match="holds 0"):
        on_disk.payload


def counting_reads(monkeypatch) -> list:
    """The paths of the payloads read from files from now on."""
    reads, read = [], FileRef.read

    def counted(ref):
        reads.append(ref.path)
        return read(ref)

    monkeypatch.setattr(FileRef, "read", counted)
    return reads


def test_a_state_on_disk_is_read_where_it_is_used_and_never_when_it_is_not(tmp_path, monkeypatch):
    from .test_prefix_reuse import OPTIONS, QUESTIONS, chat, fresh_answer, open_memory

    with open_memory(tmp_path / "home") as memory:
        memory.answer(chat(QUESTIONS[2]), OPTIONS)
        memory.answer(chat(QUESTIONS[3]), OPTIONS)  # they part ways: a derived state kept
    reads = counting_reads(monkeypatch)
    with open_memory(tmp_path / "home") as restarted:  # its states on disk only
        found, lookup = [], restarted.states.cache.lookup

        def spy(prompt, **options):
            found.append((lookup(prompt, **options), len(reads)))
            return found[-1][0]

        monkeypatch.setattr(restarted.states.cache, "lookup", spy)
        answer = restarted.answer(chat(QUESTIONS[4]), OPTIONS)
        ((state, read_then),) = found
        assert isinstance(state.ref, FileRef) and state.ref.sha256 == state.sha256 and read_then == 0  # found, not read
        assert answer.note.reused_from == "derived" and len(reads) == 1  # read once, where it was restored
        assert answer.text == fresh_answer(tmp_path, chat(QUESTIONS[4])).text
        again = restarted.answer(chat(QUESTIONS[0]), OPTIONS)  # the context holds the prefix: not even looked for
        assert found[-1][0] is None and again.note.reused_from == "slot" and len(reads) == 1
