"""Prefix reuse on the fakes: continuing what a context holds, derived prefix states captured
where prompts part ways, restored in another context and after a restart, bounded, and
ignored when damaged or foreign — the answer always the one a fresh prefill gives."""

from __future__ import annotations

import logging
import threading

import pytest

from skillgraft import AnswerOptions
from skillgraft.kv.context import KEEPER
from skillgraft.kv.prefixes import PrefixCache
from skillgraft.kv.prefixes import MIN_TAIL, Reuse, choose_reuse, common_prefix
from skillgraft.memory import SkillMemory
from skillgraft.store.derived_states import DerivedStates, Record
from skillgraft.testing import FakeEmbedder, FakeEngine

from .conftest import GIT_MANUAL

AGENT = "You are a coding agent. " + " ".join(f"Rule {i}: keep changes small and tested." for i in range(40))
QUESTIONS = ["how do I squash my last commits?", "combine commits into one please", "squash two commits with git",
             "merge my three latest commits", "how to squash commits before a push"]
OPTIONS = AnswerOptions(max_tokens=6)


def open_memory(home, **options) -> SkillMemory:
    memory = SkillMemory(home, engine=FakeEngine(), embedder=FakeEmbedder(), **options)
    if not memory.blocks.list():
        memory.add_manual("git-squash", GIT_MANUAL, examples=QUESTIONS[:2])
    return memory


def chat(question: str, system: str = AGENT):
    return [("system", system), ("user", question)]


def fresh_answer(tmp_path, messages, **options):
    """The same chat in a memory whose context holds nothing and keeps no derived state."""
    with open_memory(tmp_path / "fresh", derived_bytes=0) as memory:
        memory.engine.reset()
        return memory.answer(messages, OPTIONS, **options)


def test_common_prefix_and_the_longest_reuse_wins():
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2 and common_prefix([], [1]) == 0 and common_prefix([1, 2], [1, 2]) == 2
    engine = FakeEngine()
    block = engine.capture(list(range(10, 60)))
    prompt = list(range(10, 80))
    assert choose_reuse(prompt, block=(block, 50)).source == "block"
    assert choose_reuse(prompt, held=list(range(10, 70)), block=(block, 50)).cells == 60
    # What a context held leaves MIN_TAIL tokens to evaluate in one batch ...
    assert choose_reuse(prompt, held=prompt).cells == len(prompt) - MIN_TAIL
    # ... and a context that keeps the longest prefix it shares (a llama-server slot) is reused
    # for what it surely holds, up to the tail: its backend cuts its cells to that first.
    assert choose_reuse(prompt, held=prompt[:10], held_at_most=prompt) == Reuse("slot", 10)
    assert choose_reuse(prompt, held=prompt, held_at_most=prompt) == Reuse("slot", len(prompt) - MIN_TAIL)
    assert choose_reuse(prompt, held=list(range(10, 40)), held_at_most=list(range(10, 41))).cells == 30
    assert choose_reuse(prompt, held=[99]).source == ""
    long = list(range(10, 250))
    reuse = choose_reuse(long, held=list(range(10, 160)), capture_at=100)
    assert (reuse.source, reuse.cells, reuse.capture_at) == ("slot", 150, 100)  # saved once the answer is made
    derived = engine.capture(list(range(10, 110)))
    assert choose_reuse(long, derived=derived, capture_at=100) == choose_reuse(long, derived=derived)
    assert choose_reuse(long, derived=derived).source == "derived"
    # A few tokens more than the state at hand are not worth another file; many are.
    assert choose_reuse(long, derived=derived, capture_at=120).capture_at == 0
    assert choose_reuse(long, derived=derived, capture_at=200).capture_at == 200


def test_an_agents_prefix_is_continued_not_prefilled_and_the_answer_is_unchanged(tmp_path):
    with open_memory(tmp_path / "store") as memory:
        first = memory.answer(chat(QUESTIONS[2]), OPTIONS)
        second = memory.answer(chat(QUESTIONS[3]), OPTIONS)
        assert second.note.decision == first.note.decision == "graft"
        assert second.note.reused_from == "slot"
        assert second.note.cache_n > len(memory.engine.tokenize(AGENT)) + 10
        assert second.note.prefill_tokens_avoided == second.note.cache_n
        assert second.text == fresh_answer(tmp_path, chat(QUESTIONS[3])).text
        assert [s.token for s in second.end.steps] == [s.token for s in fresh_answer(tmp_path, chat(QUESTIONS[3])).end.steps]


def test_a_conversation_keeps_its_prefix_across_turns(tmp_path):
    with open_memory(tmp_path / "store") as memory:
        turns, previous = [("system", AGENT)], 0
        for index, question in enumerate(QUESTIONS[:4]):
            turns.append(("user", question))
            answer = memory.answer(turns, OPTIONS)
            if index:
                assert answer.note.reused_from == "slot" and answer.note.cache_n >= previous
            assert answer.text == fresh_answer(tmp_path, turns).text
            previous = answer.end.prompt_tokens
            turns.append(("assistant", answer.text or "ok"))
        switch_only = [capture for capture in memory.engine.context.pending.due(0) if capture.on_switch]
        assert len(switch_only) <= 1  # the prompt the conversation would leave: its last turn's only


def test_a_shared_prefix_becomes_a_derived_state_used_after_another_app_and_a_restart(tmp_path, caplog):
    home = tmp_path / "store"
    with open_memory(home) as memory:
        memory.answer(chat(QUESTIONS[2]), OPTIONS)  # the agent's prefix and the skill after it: pending
        memory.answer(chat(QUESTIONS[3]), OPTIONS)
        assert len(memory.states.cache.store) == 0 and len(memory.engine.context.pending) == 1  # the context holds it
        memory.answer(chat("what is a rebase?", system="You are a terse shop assistant."), OPTIONS)  # another app
        KEEPER.drain()  # (handed over before the cells went, written off the answer's path)
        assert len(memory.states.cache.store) == 1  # kept before it went (the other app's is pending now)
        third = memory.answer(chat(QUESTIONS[4]), OPTIONS)
        assert third.note.reused_from == "derived" and third.note.cache_n > 100
        assert third.text == fresh_answer(tmp_path, chat(QUESTIONS[4])).text
    with open_memory(home) as restarted:  # a new process: the context holds nothing
        again = restarted.answer(chat(QUESTIONS[0]), OPTIONS)
        assert again.note.reused_from == "derived" and again.note.cache_n == third.note.cache_n
        assert again.text == fresh_answer(tmp_path, chat(QUESTIONS[0])).text


def test_the_prompt_an_app_leaves_is_kept_when_another_app_takes_the_context(tmp_path):
    other = "You are a release manager. " + " ".join(f"Policy {i}: tag every release and note it." for i in range(40))
    ask = lambda memory, question, system=AGENT: memory.answer(chat(question, system), OPTIONS, route=False)  # noqa: E731
    with open_memory(tmp_path / "store") as memory:  # no skill, so no skill's prefix state: the app's prompts alone
        ask(memory, QUESTIONS[2])  # nothing parts ways yet: no state asked for
        ask(memory, QUESTIONS[3], other)  # another app takes the context: the first one's prompt is kept
        KEEPER.drain()
        assert len(memory.states.cache.store) == 1
        again = ask(memory, QUESTIONS[4])  # the first app again: its prefix restored, not prefilled
        assert again.note.reused_from == "derived" and again.note.cache_n > len(memory.engine.tokenize(AGENT))
        plain = fresh_answer(tmp_path, chat(QUESTIONS[4]), route=False)
        assert [s.token for s in again.end.steps] == [s.token for s in plain.end.steps]
        KEEPER.drain()
        assert len(memory.states.cache.store) == 2  # the other app's, kept as this one took the context
        ask(memory, QUESTIONS[0])  # the same app asks anew: the prompt it left is not kept
        KEEPER.drain()
        assert len(memory.states.cache.store) == 2


def test_a_damaged_or_foreign_derived_state_is_ignored_with_a_log_line(tmp_path, caplog):
    home = tmp_path / "store"
    with open_memory(home) as memory:
        memory.answer(chat(QUESTIONS[2]), OPTIONS)
        memory.answer(chat(QUESTIONS[3]), OPTIONS)
    (path,) = list((home / "derived").rglob("*.state"))  # kept when the memory closed
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="skillgraft.store"), open_memory(home) as restarted:
        answer = restarted.answer(chat(QUESTIONS[4]), OPTIONS)
        assert answer.note.reused_from != "derived" and "damaged" in caplog.text
        assert answer.text == fresh_answer(tmp_path, chat(QUESTIONS[4])).text
        assert not path.exists()
    other = FakeEngine("another-model")
    foreign = DerivedStates(tmp_path / "derived", other.fingerprint)
    cache = PrefixCache(foreign, other.fingerprint.id, other.cut_state)
    cache.keep(other.capture(list(range(5, 100))))
    mine = DerivedStates(tmp_path / "derived", FakeEngine().fingerprint)
    assert len(mine) == 0 and PrefixCache(mine, FakeEngine().fingerprint.id, FakeEngine().cut_state).lookup(list(range(5, 120))) is None


def test_the_size_limit_holds_over_a_long_run(tmp_path):
    engine = FakeEngine()
    one = engine.capture(list(range(5, 205)))
    limit = 3 * (one.n_bytes + 4096)
    store = DerivedStates(tmp_path / "derived", engine.fingerprint, max_bytes=limit, memory_bytes=one.n_bytes * 2)
    cache = PrefixCache(store, engine.fingerprint.id, engine.cut_state)
    for index in range(40):
        cache.keep(engine.capture([index % 200 + 1, *range(5, 205)]))
        assert store.n_bytes <= limit and len(store) <= 3
    assert sum(p.stat().st_size for p in (tmp_path / "derived").glob("*.state")) <= limit
    reopened = DerivedStates(tmp_path / "derived", engine.fingerprint, max_bytes=limit)
    assert len(reopened) == len(store)
    with pytest.raises(Exception):
        DerivedStates(tmp_path / "d2", engine.fingerprint, max_bytes=-1)


def test_no_derived_state_for_a_read_only_store_or_a_zero_budget(tmp_path):
    home = tmp_path / "store"
    open_memory(home).close()
    with open_memory(home, derived_bytes=0) as memory:
        memory.answer(chat(QUESTIONS[2]), OPTIONS)
        memory.answer(chat(QUESTIONS[3]), OPTIONS)
        assert memory.states.cache is None and not (home / "derived").exists()


def test_the_gateway_leases_the_slot_that_holds_the_longest_prefix():
    from skillgraft.gateway.pool import ServerPool

    class Engine:
        def __init__(self, held):
            self.held = held

        def held_tokens(self, slot):
            return self.held[slot]

    pool = ServerPool.__new__(ServerPool)
    import queue

    pool.engines = [Engine({0: [1, 2, 3], 1: [1, 2, 3, 4, 5]}), Engine({0: [9], 1: None})]
    pool._free = queue.Queue()
    for item in [(0, 0), (1, 0), (0, 1), (1, 1)]:
        pool._free.put(item)
    pool._closed = type("E", (), {"is_set": lambda self: False})()
    pool._queue_lock = threading.Lock()
    assert pool._take((), 1.0, lambda s, n: common_prefix(pool.engines[s].held_tokens(n) or (), [1, 2, 3, 4, 9])) == (0, 1)
    assert pool._free.qsize() == 3
    assert pool._take((0,), 1.0, None) == (1, 0)  # another server than the one avoided


def test_a_derived_state_longer_than_what_a_prompt_shares_is_cut_to_it(tmp_path):
    with open_memory(tmp_path / "store") as memory:
        # not routed: the state is captured where the prompts part ways, not at a skill's end
        memory.answer(chat("how do I squash my commits?"), OPTIONS, route=False)
        memory.answer(chat("how do I combine two commits?"), OPTIONS, route=False)  # they share "how do I" too
        memory.answer(chat("what is a rebase?", system="You are a terse shop assistant."), OPTIONS, route=False)
        KEEPER.drain()
        ((_, tokens, _),) = memory.states.cache.store.entries()
        third = memory.answer(chat("squash my commits before a push"), OPTIONS, route=False)
        assert third.note.reused_from == "derived" and third.note.cache_n < len(tokens)
        assert third.text == fresh_answer(tmp_path, chat("squash my commits before a push"), route=False).text


def test_another_skill_behind_the_same_app_continues_the_apps_prefix(tmp_path):
    from .conftest import OUT_OF_DOMAIN, SOURDOUGH_MANUAL

    home = tmp_path / "store"
    bread = ["how long should sourdough proof?", "my sourdough starter smells sour, is it fine?"]

    def fresh(question):
        with open_memory(tmp_path / "fresh", derived_bytes=0) as memory:
            if len(memory.blocks.list()) == 1:
                memory.add_manual("sourdough", SOURDOUGH_MANUAL, examples=bread)
            memory.engine.reset()
            return memory.answer(chat(question), OPTIONS)

    with open_memory(home) as memory:
        memory.add_manual("sourdough", SOURDOUGH_MANUAL, examples=bread)
        app = len(memory.engine.tokenize(memory.engine.chat_prompt([("system", AGENT)], add_generation_prompt=False)))
        first = memory.answer(chat(QUESTIONS[2]), OPTIONS)
        second = memory.answer(chat(bread[0]), OPTIONS)  # another skill: the app's prefix in front of it continued
        assert (first.note.block_name, second.note.block_name) == ("git-squash", "sourdough")
        assert second.note.reused_from == "slot" and second.note.cache_n >= app
        assert second.text == fresh(bread[0]).text
        plain = memory.answer(chat(OUT_OF_DOMAIN), OPTIONS)  # no skill: the app's prefix continued too
        assert plain.note.decision == "abstain" and plain.note.cache_n >= app
        memory.states.flush()
    with open_memory(home) as restarted:  # each skill behind the app was kept on its first use
        again = restarted.answer(chat(bread[1]), OPTIONS)
        assert again.note.block_name == "sourdough" and again.note.reused_from == "derived"
        assert again.note.cache_n > app + 20  # the app's prompt and the skill after it
        assert again.text == fresh(bread[1]).text
        other = restarted.answer(chat("Who painted the Mona Lisa?"), OPTIONS)
        assert other.note.decision == "abstain" and other.note.reused_from in ("derived", "slot")
        assert other.note.cache_n >= app and other.text == fresh("Who painted the Mona Lisa?").text


def test_every_new_skill_behind_one_app_keeps_its_prefix_whatever_the_blocks_lengths(tmp_path):
    from .conftest import SOURDOUGH_MANUAL

    long_manual = "Skill manual: hardening a Dockerfile. " + " ".join(
        f"Step {i}: pin the base image by digest, drop root, and copy only what the build needs." for i in range(8))
    with open_memory(tmp_path / "store") as memory:
        memory.add_manual("sourdough", SOURDOUGH_MANUAL, examples=["how long should sourdough proof?"])
        memory.add_manual("dockerfile", long_manual, examples=["how do I harden my Dockerfile?"])
        kept = []
        for name in ("git-squash", "sourdough", "dockerfile", "git-squash", "sourdough", "dockerfile"):
            answer = memory.answer(chat(f"a question about {name}, please"), OPTIONS, block=name)
            KEEPER.drain()  # (a state handed over is written off the answer's path)
            kept.append((answer.note.reused_from, len(memory.states.cache.store)))
        # Each request behind a block the app has not used yet keeps its derived state (the app's
        # prompt and the block after it, once the context turns to the next block), the long
        # block's too; the second round reuses them.
        assert [count for _, count in kept] == [0, 1, 2, 3, 3, 3]
        assert [source for source, _ in kept[3:]] == ["derived", "derived", "derived"]


def _kept_state(tmp_path, engine):
    """A derived-state folder holding one state of ``engine``'s; ``(folder, its file, the prompt it serves)``."""
    folder = tmp_path / "derived"
    cache = PrefixCache(DerivedStates(folder, engine.fingerprint), engine.fingerprint.id, engine.cut_state)
    cache.keep(engine.capture(list(range(5, 100))))
    (path,) = folder.glob("*.state")
    return folder, path, list(range(5, 120))


def test_leftovers_that_cannot_be_deleted_do_not_stop_the_cache_from_opening(tmp_path):
    engine = FakeEngine()
    folder, path, prompt = _kept_state(tmp_path, engine)
    (folder / ".half-written.tmp").mkdir()  # a folder where a staged file is expected
    (folder / ".half-written.tmp" / "x").write_bytes(b"x")
    (folder / ("0" * 64 + ".state")).mkdir()  # a folder named as a state
    store = DerivedStates(folder, engine.fingerprint)
    assert len(store) == 1
    assert PrefixCache(store, engine.fingerprint.id, engine.cut_state).lookup(prompt) is not None


def test_a_state_swapped_for_a_link_is_never_read_through_it(tmp_path, caplog):
    engine = FakeEngine()
    folder, path, prompt = _kept_state(tmp_path, engine)
    store = DerivedStates(folder, engine.fingerprint, memory_bytes=0)  # every get reads the file
    outside = tmp_path / "outside.state"
    outside.write_bytes(path.read_bytes())  # a valid state, but not one of the folder's files
    path.unlink()
    path.symlink_to(outside)
    cache = PrefixCache(store, engine.fingerprint.id, engine.cut_state)
    with caplog.at_level(logging.WARNING, logger="skillgraft.store"):
        assert cache.lookup(prompt) is None
    assert outside.exists() and len(store) == 0
    assert len(DerivedStates(folder, engine.fingerprint)) == 0  # a link is not one of its states either


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="FIFOs are POSIX")
def test_a_state_swapped_for_a_fifo_or_a_link_to_a_device_is_not_waited_on(tmp_path):
    import os

    engine = FakeEngine()
    folder, path, prompt = _kept_state(tmp_path, engine)
    store = DerivedStates(folder, engine.fingerprint, memory_bytes=0)
    results = []
    for swap in (lambda: os.mkfifo(path), lambda: path.symlink_to("/dev/zero")):
        path.unlink(missing_ok=True)
        swap()
        store._files[path.name[:-6]] = (100, tuple(range(5, 100)), Record("0" * 64))  # as the scan had found it
        worker = threading.Thread(target=lambda: results.append(store.get(path.name[:-6])), daemon=True)
        worker.start()
        worker.join(10)
        assert not worker.is_alive(), "a read of a FIFO or a device never ends"
    assert results == [None, None]


def test_a_state_file_whose_header_is_nested_past_the_parser_is_damaged_not_a_crash(tmp_path):
    import struct

    from skillgraft.store.derived_states import MAGIC

    engine = FakeEngine()
    folder, path, prompt = _kept_state(tmp_path, engine)
    store = DerivedStates(folder, engine.fingerprint, memory_bytes=0)
    header = b"[" * 200_000
    path.write_bytes(MAGIC + struct.pack("<I", len(header)) + header)
    assert PrefixCache(store, engine.fingerprint.id, engine.cut_state).lookup(prompt) is None  # read: damaged
    path.write_bytes(MAGIC + struct.pack("<I", len(header)) + header)
    assert len(DerivedStates(folder, engine.fingerprint)) == 0  # scanned: not one of its states
