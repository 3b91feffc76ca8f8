"""One AnswerContext over a KVBackend: the context decides, the backend is told before it drops
cells, pending captures are the context's own, and a payload is a StateRef."""

from __future__ import annotations

import threading

import pytest

from skillgraft.core.states import BytesRef, FileRef, KVState
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
    path.write_bytes(b"head")
    with pytest.raises(OSError):
        on_disk.payload
