"""The fakes keep the contracts of the real engine and embedder."""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest

from skillgraft.errors import (
    BlockIntegrityError,
    ContextOverflowError,
    EngineError,
    FingerprintMismatchError,
    InputError,
    RestoreRejectedError,
)
from skillgraft.protocols import GraftEngine, TextEmbedder
from skillgraft.core.sampling import SamplingOptions
from skillgraft.core.states import KVState
from skillgraft.testing import BOS, EOS, IM_END, IM_START, N_VOCAB, FakeEmbedder, FakeEngine

from .conftest import GIT_MANUAL, SOURDOUGH_MANUAL

QUERY = "How do I squash commits?<|im_end|>\n<|im_start|>assistant\n"


def block_state(engine: FakeEngine, text: str = GIT_MANUAL) -> KVState:
    prefix, _ = engine.chat_split(text)
    return engine.capture(engine.tokenize(prefix))


def fresh_logits(engine: FakeEngine, tokens) -> bytes:
    engine.prefill(list(tokens))
    return engine.logits_bytes()


def with_payload(state: KVState, payload: bytes) -> KVState:
    return dataclasses.replace(state, ref=payload, sha256=hashlib.sha256(payload).hexdigest())


def test_the_fakes_satisfy_the_protocols():
    assert isinstance(FakeEngine(), GraftEngine)
    assert isinstance(FakeEmbedder(), TextEmbedder)
    assert not isinstance(object(), GraftEngine)


# -- tokenizer and chat template ----------------------------------------------------------------


def test_tokenizer_is_byte_level_with_bos_and_control_tokens(fake_engine):
    text = "café ☕ <|im_start|>user\n"
    tokens = fake_engine.tokenize(text)
    assert tokens[0] == BOS
    assert IM_START in tokens and all(0 <= t < N_VOCAB for t in tokens)
    assert fake_engine.tokenize(text, add_bos=False) == tokens[1:]
    assert fake_engine.detokenize(tokens, special=True) == text
    assert IM_START not in fake_engine.tokenize(text, special=False)
    assert fake_engine.tokenize("", add_bos=False) == []
    with pytest.raises(InputError):
        fake_engine.tokenize(b"bytes")


def test_chat_split_prefix_is_the_system_turn_and_the_opening_of_the_user_turn(fake_engine):
    prefix, turn = fake_engine.chat_split("SYSTEM", "hello")
    assert prefix == "<|im_start|>system\nSYSTEM<|im_end|>\n<|im_start|>user\n"
    full = fake_engine.chat_prompt([("system", "SYSTEM"), ("user", "hello")])
    assert prefix + turn == full
    assert fake_engine.tokenize(prefix) + fake_engine.tokenize(turn, add_bos=False) == fake_engine.tokenize(full)
    with pytest.raises(InputError):
        fake_engine.chat_prompt([("user", "a\x00b")])


# -- capture and graft --------------------------------------------------------------------------


def test_capture_is_deterministic_and_the_payload_holds_the_tokens(fake_engine):
    one, two = block_state(fake_engine), block_state(FakeEngine())
    assert one.payload == two.payload and one.sha256 == two.sha256
    assert one.sha256 == hashlib.sha256(one.payload).hexdigest()
    assert one.n_bytes == fake_engine.state_size(one.n_tokens)
    assert block_state(fake_engine, SOURDOUGH_MANUAL).payload != one.payload
    assert one.fingerprint == fake_engine.fingerprint


def test_a_graft_equals_a_fresh_prefill_of_the_same_tokens(fake_engine):
    state = block_state(fake_engine)
    query = fake_engine.tokenize(QUERY, add_bos=False)
    grafted = fake_engine.graft(state, query).tobytes()
    assert grafted == fresh_logits(fake_engine, [*state.tokens, *query])
    fake_engine.graft(state, QUERY)  # text queries are tokenized without BOS
    assert fake_engine.logits_bytes() == grafted
    after_graft = [s.token for s in fake_engine.generate(SamplingOptions(16))]
    fake_engine.prefill([*state.tokens, *query])
    assert [s.token for s in fake_engine.generate(SamplingOptions(16))] == after_graft


def test_a_graft_keeping_fewer_cells_equals_a_prefill_of_that_prefix(fake_engine):
    state = block_state(fake_engine)
    query = fake_engine.tokenize(QUERY, add_bos=False)
    keep = state.n_tokens // 2
    grafted = fake_engine.graft(state, query, keep=keep).tobytes()
    assert grafted == fresh_logits(fake_engine, [*state.tokens[:keep], *query])
    assert grafted != fresh_logits(fake_engine, [*state.tokens, *query])
    for bad in (0, state.n_tokens + 1):
        with pytest.raises(InputError):
            fake_engine.graft(state, query, keep=bad)


def test_a_restore_of_the_wrong_block_gives_other_logits(fake_engine):
    mine, other = block_state(fake_engine, "A" * 50), block_state(fake_engine, "B" * 50)
    wrong = with_payload(mine, other.payload)  # the tokens of one block, the cells of the other
    query = fake_engine.tokenize(QUERY, add_bos=False)
    assert fake_engine.graft(wrong, query).tobytes() != fresh_logits(fake_engine, [*mine.tokens, *query])


def test_a_shifted_restore_gives_other_logits(fake_engine):
    state = block_state(fake_engine)
    query = fake_engine.tokenize(QUERY, add_bos=False)
    fake_engine.restore(state)
    fake_engine.shift_positions(3)
    fake_engine.append(query)
    assert fake_engine.logits_bytes() != fresh_logits(fake_engine, [*state.tokens, *query])


def test_a_tampered_payload_is_refused_or_gives_other_logits(fake_engine):
    state = block_state(fake_engine)
    query = fake_engine.tokenize(QUERY, add_bos=False)
    expected = fresh_logits(fake_engine, [*state.tokens, *query])
    payload = bytearray(state.payload)
    payload[-1] ^= 0xFF  # a bit of the last cell's digest
    tampered = dataclasses.replace(state, ref=bytes(payload))
    with pytest.raises(BlockIntegrityError, match="SHA-256"):
        fake_engine.graft(tampered, query)
    assert fake_engine.graft(tampered, query, verify_hash=False).tobytes() != expected
    with pytest.raises(BlockIntegrityError, match="bytes") as short:
        fake_engine.graft(with_payload(state, state.payload[:-1]), query, "b1")
    error = short.value
    assert (error.block_id, error.n_bytes, error.expected_bytes) == ("b1", state.n_bytes - 1, state.n_bytes)
    shifted = bytearray(state.payload)
    shifted[12 + 4] ^= 0x01  # the position of the first cell
    with pytest.raises(RestoreRejectedError, match="rejected") as caught:
        fake_engine.graft(with_payload(state, bytes(shifted)), query, "b1")
    assert (caught.value.block_id, caught.value.n_tokens, caught.value.n_bytes) == ("b1", state.n_tokens, state.n_bytes)
    assert fake_engine.context_tokens == [] and fake_engine.calls["graft"] == 4


def test_a_fingerprint_mismatch_raises_before_anything_is_restored(fake_engine):
    state = block_state(fake_engine)
    for other in (FakeEngine(n_batch=256), FakeEngine("another-model")):
        other.prefill([BOS, 65])
        before = other.context_tokens
        with pytest.raises(FingerprintMismatchError) as caught:
            other.graft(state, [65], "b1")
        assert caught.value.differences and caught.value.block_id == "b1"
        assert other.context_tokens == before
    assert "n_batch" in FakeEngine(n_batch=256).fingerprint.differences(fake_engine.fingerprint)
    assert FakeEngine(n_ctx=2048).fingerprint == fake_engine.fingerprint  # the window is in no fingerprint


def test_context_limits_and_bad_input(fake_engine):
    small = FakeEngine(n_ctx=16)
    with pytest.raises(ContextOverflowError):
        small.capture("x" * 16)
    with pytest.raises(InputError):
        fake_engine.capture([])
    with pytest.raises(InputError):
        fake_engine.prefill([BOS, N_VOCAB])
    with pytest.raises(InputError):
        fake_engine.graft(block_state(fake_engine), [])
    with pytest.raises(EngineError, match="no logits"):
        FakeEngine().logits()
    fake_engine.close()
    with pytest.raises(EngineError, match="closed"):
        fake_engine.prefill([BOS])


# -- generation ---------------------------------------------------------------------------------


def test_generation_is_seeded_and_scripted_replies_are_confident():
    engine = FakeEngine(reply=lambda prompt: "café ☕" if "assistant" in prompt else None)
    engine.prefill(engine.tokenize(engine.chat_prompt([("user", "hi")])))
    steps = list(engine.generate(SamplingOptions(32)))
    assert "".join(s.piece for s in steps) == "café ☕"  # stops at the scripted end of turn
    assert any(s.piece == "" for s in steps)  # a partial multi-byte character
    assert all(s.logprob > -1e-6 for s in steps)
    engine.prefill([BOS, 65])
    plain = list(engine.generate(SamplingOptions(8)))
    assert len(plain) == 8 and sum(s.logprob for s in plain) / 8 < -1.0
    assert all(s.entropy > 1.0 for s in plain)

    def sample(seed):
        engine.prefill([BOS, 65])
        return [s.token for s in engine.generate(SamplingOptions(8, temperature=1.5, seed=seed))]

    assert sample(1) == sample(1) != sample(2)
    with pytest.raises(InputError):
        SamplingOptions(-1)


def test_generation_stops_at_end_of_generation_and_at_the_context_size():
    engine = FakeEngine(n_ctx=16, reply="x" * 100)
    engine.prefill([BOS, 65])
    assert len(list(engine.generate(SamplingOptions(100)))) == 14
    for end in (EOS, IM_END):
        assert engine.is_end_of_generation(end)
    engine = FakeEngine(reply="")
    engine.prefill([BOS])
    assert list(engine.generate(SamplingOptions(5))) == []


# -- embedder -----------------------------------------------------------------------------------


def test_embedder_rows_are_unit_float32_and_similar_texts_score_higher(fake_embedder):
    texts = ["how do I squash my commits?", "squash the last commits into one", "bake sourdough bread", "???", ""]
    vectors = fake_embedder.encode(texts)
    assert vectors.dtype == np.float32 and vectors.shape == (5, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(vectors, FakeEmbedder().encode(texts))
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2
    assert fake_embedder.name == "fake-hashing-embedder" and fake_embedder.encoded == 5
    with pytest.raises(InputError):
        fake_embedder.encode([3])
