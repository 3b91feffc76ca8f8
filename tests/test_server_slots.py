"""A llama-server of several slots keeps one KV stream a slot (``--no-kv-unified``), on both
embedded models: a slot attends over its own cells only, as llama-server's ``-np`` does, and a
state moves between slots byte for byte.

A unified KV made every slot attend over every slot's cells: with two agents at once each
prefill cost about a third more (docs/benchmarks.md, under load). A server of K streams saves a
slot as K streams, all empty but its own, its cells naming the slot's sequence; a block keeps
one stream naming sequence 0, so its bytes are a one-slot server's and the in-process engine's.
"""

from __future__ import annotations

import struct

import pytest

from skillgraft.core.sampling import SamplingOptions

from tests.required import require_llama_server

pytestmark = pytest.mark.server

TEXT = "A git rebase rewrites a branch so that its commits sit on top of another base. " * 3
QUERY = " Question: what does it rewrite?"
GREEDY = SamplingOptions(8)


@pytest.fixture(scope="module", params=["smollm2-135m", "gemma3-270m"])
def two_slots(request):
    from skillgraft.server.engine import LlamaServerEngine

    require_llama_server()
    engine = LlamaServerEngine(request.param, n_slots=2)
    try:
        yield engine
    finally:
        engine.close()


@pytest.fixture
def in_process(two_slots, request):
    return request.getfixturevalue("smollm2" if two_slots.model_name.startswith("smollm2") else "gemma3")


def test_each_slot_keeps_its_own_stream_of_half_the_window(two_slots):
    from skillgraft.engine.models import settings_for

    assert two_slots.settings.n_ctx == settings_for(two_slots.model_name).n_ctx // 2  # as llama-server divides it
    argv = two_slots.server.argv
    assert "--no-kv-unified" in argv and "--kv-unified" not in argv
    assert int(argv[argv.index("-c") + 1]) == 2 * two_slots.settings.n_ctx
    assert two_slots.server.n_ctx_slot == two_slots.settings.n_ctx
    assert two_slots.slot_files.n_stream == 2
    assert (two_slots.fingerprint.n_seq_max, two_slots.fingerprint.kv_unified) == (2, False)


def test_a_capture_on_either_slot_is_the_in_process_engines_bytes(two_slots, in_process):
    tokens = in_process.tokenize(TEXT)
    reference = in_process.capture(tokens).payload
    for slot in (0, 1):
        state = two_slots.capture(tokens, slot=slot)
        assert struct.unpack_from("<I", state.payload, 8)[0] == 1  # one stream, as a block keeps it
        assert state.payload == reference, f"slot {slot}"


def test_a_state_moves_between_slots_and_answers_as_the_slot_that_prefilled_it(two_slots):
    """Slot 1, given slot 0's state, answers as slot 0 continuing its own prefill (the same
    chunking; Gemma 3's one-batch prefill of the whole prompt gives other bits either way)."""
    tokens = two_slots.tokenize(TEXT)
    prompt = [*tokens, *two_slots.tokenize(QUERY, add_bos=False)]
    state = two_slots.capture(tokens, slot=0)
    two_slots.erase_slot(1)
    assert two_slots.restore(state, "moved", slot=1).n_restored == len(tokens)
    assert two_slots.save_slot(1) == (tuple(tokens), state.payload)  # the round trip, byte for byte
    moved = two_slots.complete(prompt, GREEDY, slot=1, n_probs=3)
    continued = two_slots.complete(prompt, GREEDY, slot=0, n_probs=3)
    assert (moved.cache_n, moved.prompt_n) == (continued.cache_n, continued.prompt_n) == (len(tokens), len(prompt) - len(tokens))
    assert moved.steps == continued.steps  # the same tokens and top probabilities
