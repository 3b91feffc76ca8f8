"""States found by key: chained block keys, the prefix index, the keyed lookup of derived states
(a few reads whatever the number of states), and the migration of states kept under the old
address."""

from __future__ import annotations

import random

from skillgraft.kv.prefixes import BLOCK_TOKENS, PrefixIndex, chain_keys, legacy_state_key, state_key
from skillgraft.kv.prefixes import PrefixCache
from skillgraft.store.derived_states import DerivedStates, encode_state
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
    assert key != state_key("rt2", tokens) and key != legacy_state_key("rt", tokens)


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
    index.sync([("other", [5] * 90)])
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
        return [(key, state.tokens) for key, state in self.states.items()]

    def get(self, key):
        self.reads += 1
        return self.states.get(key)

    def put(self, key, state, parent=None):
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


def test_states_kept_under_the_old_address_are_renamed_and_found(tmp_path):
    engine = FakeEngine()
    state = engine.capture(list(range(1, 100)))
    folder = tmp_path / "derived"
    folder.mkdir()
    old = legacy_state_key(engine.fingerprint.id, state.tokens)
    (folder / f"{old}.state").write_bytes(encode_state(state))
    store = DerivedStates(folder, engine.fingerprint)
    new = state_key(engine.fingerprint.id, state.tokens)
    assert [key for key, _ in store.entries()] == [new] and not (folder / f"{old}.state").exists()
    cache = PrefixCache(store, engine.fingerprint.id, engine.cut_state)
    assert cache.lookup([*range(1, 100), *range(200, 220)]).payload == state.payload
