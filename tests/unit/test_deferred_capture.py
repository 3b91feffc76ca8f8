"""Derived states are kept when their cells are about to go, never while an answer waits."""

from __future__ import annotations

import queue
import threading
import time

from skillgraft.kv.context import KEEPER, PendingCapture, PendingCaptures
from skillgraft.gateway.pool import ServerPool
from skillgraft.errors import SlotReuseError
from skillgraft.gateway.service import Gateway
from skillgraft.testing import FakePool

from .test_prefix_reuse import OPTIONS, QUESTIONS, chat, open_memory


def test_pending_captures_are_due_only_when_their_cells_would_go():
    pending = PendingCaptures()
    head = tuple(range(100))
    short, long = PendingCapture(head, "", None), PendingCapture((*head, *range(200, 264)), "", None)
    pending.add(short)
    pending.add(long)  # MIN_DERIVED_TOKENS longer: worth a state of its own
    for served in (head, head[:50], (*head, 1, 2, 3)):  # the same, shorter, only a few tokens longer
        pending.add(PendingCapture(served, "", None))
    assert len(pending) == 2
    assert pending.due(keeps=164) == []  # the next use keeps both
    assert pending.due(keeps=120) == [long]  # only what the next use drops
    assert pending.due() == [short] and len(pending) == 0


def test_an_agents_later_requests_write_nothing_and_the_state_is_kept_when_the_context_turns(tmp_path):
    home = tmp_path / "store"
    with open_memory(home) as memory:
        for question in QUESTIONS[:4]:  # one app, one prefix, four questions
            memory.answer(chat(question), OPTIONS)
        assert not list((home / "derived").rglob("*.state"))  # no answer waited for a state
        assert len(memory.engine.context.pending) == 1
        memory.engine.reset()  # whatever drops the cells keeps the state first
        KEEPER.drain()  # (hashed and written off the answers' path)
        assert len(list((home / "derived").rglob("*.state"))) == 1 and len(memory.engine.context.pending) == 0
    with open_memory(home) as restarted:
        again = restarted.answer(chat(QUESTIONS[4]), OPTIONS)
        assert again.note.reused_from == "derived"


def test_a_pending_state_no_longer_held_is_dropped_quietly(tmp_path, caplog):
    with open_memory(tmp_path / "store") as memory:
        memory.answer(chat(QUESTIONS[2]), OPTIONS)
        memory.answer(chat(QUESTIONS[3]), OPTIONS)
        engine = memory.engine
        engine.shift_positions(1)  # a control that moves the cells: the prefix is not held at its positions
        with caplog.at_level("WARNING"):
            assert memory.states.flush() == 0
        assert len(memory.states.cache.store) == 0 and "not kept" not in caplog.text


def test_the_gateway_keeps_what_its_slots_hold_when_it_closes(fake_stocked, fake_engine, fake_embedder):
    home = fake_stocked.store.home
    gateway = Gateway(home, FakePool(fake_engine), embedder=fake_embedder)
    for question in QUESTIONS[2:4]:
        plan = gateway.prepare(chat(question))
        gateway.chat(plan, OPTIONS)
    assert len(gateway.prefixes.store) == 0 and len(fake_engine.context.pending) == 1
    gateway.close()
    assert len(list((home / "derived").rglob("*.state"))) == 1


class _Context:
    def __init__(self, engine, slot):
        self.engine, self.slot, self.pending = engine, slot, PendingCaptures()

    def settle(self):
        self.engine.settled.append(self.slot)
        return len(self.pending.due())


class _Engine:
    def __init__(self):
        self.contexts = {slot: _Context(self, slot) for slot in (0, 1)}
        self.settled = []

    def context(self, slot):
        return self.contexts[slot]

    def pending_slots(self):
        return sorted(slot for slot, context in self.contexts.items() if len(context.pending))


def _pool(engine) -> ServerPool:
    pool = ServerPool.__new__(ServerPool)
    pool.engines, pool.n_slots = [engine], 2
    pool._free, pool._released = queue.Queue(), {}
    pool._count_lock, pool._queue_lock = threading.Lock(), threading.Lock()
    pool._closed = threading.Event()
    for slot in (0, 1):
        pool._free.put((0, slot))
    return pool


def test_the_pool_keeps_the_states_of_idle_slots_only_and_never_takes_a_leased_one():
    engine = _Engine()
    pool = _pool(engine)
    for slot in (0, 1):
        engine.context(slot).pending.add(PendingCapture((1, 2, 3), "", None))
    pool._free.get()  # slot 0 is leased
    pool._released[(0, 1)] = time.monotonic()
    assert pool.settle_captures(idle_s=60.0, wait_s=0.0) == 0  # slot 1 was used just now
    assert pool.settle_captures(idle_s=0.0, wait_s=0.0) == 1 and engine.settled == [1]
    assert pool._free.qsize() == 1 and engine.pending_slots() == [0]  # slot 1 is free again
    pool._free.put((0, 0))  # the lease ends
    assert pool.settle_captures(idle_s=0.0, wait_s=0.0) == 1 and pool._free.qsize() == 2


def test_a_slot_that_does_not_reuse_what_it_was_asked_answers_again_afresh(fake_stocked, fake_engine, fake_embedder,
                                                                              caplog):
    """A server slot that reports other reused cells than asked (SlotReuseError) before anything
    was sent costs a prefill, never the chat: the request is answered again, evaluated afresh."""
    gateway = Gateway(fake_stocked.store.home, FakePool(fake_engine), embedder=fake_embedder)
    try:
        expected = gateway.chat(gateway.prepare(chat(QUESTIONS[2])), OPTIONS)[0].text
        generate, refused = fake_engine.generate, []

        def refuse_once(options):
            if not refused:
                refused.append(True)
                raise SlotReuseError("a prompt", 0, 0, 100, 120, 20)
            return generate(options)

        fake_engine.generate = refuse_once
        with caplog.at_level("WARNING"):
            again = gateway.chat(gateway.prepare(chat(QUESTIONS[2])), OPTIONS)[0]
        assert refused and again.text == expected and "evaluated afresh" in caplog.text
        assert again.note.reused_from != "slot"  # the slot's cells were not trusted again
    finally:
        gateway.close()
