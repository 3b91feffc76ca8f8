"""States found by key: chained block keys, the prefix index, the keyed lookup of derived states
(a few reads whatever the number of states), and scopes that never find each other's states."""

from __future__ import annotations

import random

from skillgraft.kv.prefixes import BLOCK_TOKENS, PrefixIndex, chain_keys, reuse_scope, state_key
from skillgraft.kv.prefixes import PrefixCache
from skillgraft.store.derived_states import DerivedStates
from skillgraft.testing import FakeEngine


def test_chain_keys_are_equal_exactly_as_far_as_the_blocks_are():
    a = list(range(100))
    b = a[:40] + [999] + a[41:]
    ka, kb = chain_keys("rt", a), chain_keys("rt", b)
    assert len(ka) == 100 // BLOCK_TOKENS
    shared_blocks = 40 // BLOCK_TOKENS
    assert ka[:shared_blocks] == kb[:shared_blocks] and all(x != y for x, y in zip(ka[shared_blocks:], kb[shared_blocks:]))
    assert chain_keys("other runtime", a)[0] != ka[0]  # the runtime starts the chain


def test_a_state_key_names_the_runtime_and_every_token():
    tokens = list(range(37))
    key = state_key("rt", tokens)
    assert len(key) == 64 and key == state_key("rt", tuple(tokens))
    assert key != state_key("rt", tokens[:-1]) and key != state_key("rt", [*tokens[:-1], 99])
    assert key != state_key("rt2", tokens)
    scope = reuse_scope("team-a")
    assert key != state_key("rt", tokens, scope) and state_key("rt", tokens, scope) != state_key("rt", tokens, reuse_scope("team-b"))


def test_a_scope_names_its_namespace_and_salt_unreadably():
    assert reuse_scope() == "" == reuse_scope("", "")
    scopes = {reuse_scope("a"), reuse_scope("b"), reuse_scope("a", "s"), reuse_scope("", "s"), reuse_scope("a\0", "")}
    assert len(scopes) == 5 and all(len(s) == 32 and "a" != s for s in scopes)
    assert reuse_scope("a", "s") == reuse_scope("a", "s") and reuse_scope("a\0s") != reuse_scope("a", "s")


def test_the_index_finds_only_the_prompts_scope():
    index = PrefixIndex("rt")
    tokens = list(range(1000, 1100))
    index.add("theirs", tokens, reuse_scope("a"))
    assert index.candidates(tokens + [1], at_least=16) == []  # the default scope
    assert index.candidates(tokens + [1], at_least=16, scope=reuse_scope("b")) == []
    assert index.candidates(tokens + [1], at_least=16, scope=reuse_scope("a"))[0] == (100, "theirs")


def test_the_index_finds_the_longest_shared_prefix_then_shorter_ones():
    index = PrefixIndex("rt")
    base = list(range(1000, 1200))
    index.add("short", base[:70])
    index.add("long", base[:150] + [1, 2, 3])
    index.add("other", [5] * 90)
    prompt = base[:180]
    found = index.candidates(prompt, at_least=20)
    assert found[0] == (150, "long") and found[1] == (70, "short") and "other" not in {k for _, k in found}
    index.remove("long")
    assert index.candidates(prompt, at_least=20) == [(70, "short")]
    index.sync([("other", [5] * 90, "")])
    assert index.candidates(prompt, at_least=20) == [] and len(index) == 1


def test_a_partial_last_block_counts_to_the_token():
    index = PrefixIndex("rt")
    index.add("s", list(range(75)))
    assert index.candidates(list(range(73)) + [0, 0, 0], at_least=16) == [(73, "s")]


class CountingStore:
    """A DerivedStore over a dict that counts the states it reads."""

    def __init__(self, states):
        self.states, self.reads, self.listed, self.generation = dict(states), 0, 0, 0

    def entries(self):
        self.listed += 1
        return [(key, state.tokens, "") for key, state in self.states.items()]

    def get(self, key):
        self.reads += 1
        return self.states.get(key)

    def put(self, key, state, parent=None, scope=""):
        self.states[key] = state
        self.generation += 1


def test_the_lookup_reads_one_state_of_hundreds_and_follows_the_store(tmp_path):
    engine = FakeEngine()
    rng = random.Random(7)
    system = [rng.randrange(1, 250) for _ in range(160)]
    states = {}
    for i in range(300):  # many apps' prefixes, and many questions behind one app
        tokens = [rng.randrange(1, 250) for _ in range(120)] if i % 2 else system + [i % 250, (i + 1) % 250] * 10
        state = engine.capture(tokens)
        states[state_key(engine.fingerprint.id, state.tokens)] = state
    store = CountingStore(states)
    cache = PrefixCache(store, engine.fingerprint.id, engine.cut_state)
    prompt = system + [7, 8, 9] * 12
    found = cache.lookup(prompt)
    assert found is not None and found.tokens == tuple(system) and store.reads == 1
    for question in range(5):  # later prompts: key lookups only, the store is not listed again
        assert cache.lookup(system + [251 + question] * 20).tokens == tuple(system)
    assert store.listed == 1 and store.reads == 6
    longer = engine.capture(system + [7, 8, 9] * 8)
    cache.keep(longer)  # the index follows the store
    assert cache.lookup(prompt).tokens == longer.tokens


def test_a_cache_seen_from_another_scope_finds_nothing_and_captures_apart(tmp_path):
    engine = FakeEngine()
    store = DerivedStates(tmp_path / "derived", engine.fingerprint)
    cache = PrefixCache(store, engine.fingerprint.id, engine.cut_state)
    mine, theirs = cache.scoped(reuse_scope("a")), cache.scoped(reuse_scope("b"))
    secret = list(range(1, 120))
    mine.keep(engine.capture(secret))
    prompt = secret + [200 + i for i in range(20)]
    assert mine.lookup(prompt).tokens == tuple(secret)
    assert theirs.lookup(prompt) is None and cache.lookup(prompt) is None
    mine.remember(secret + [300] * 20)
    assert theirs.capture_point(prompt) == 0 and mine.capture_point(prompt) == len(secret)
