import numpy as np
import pytest

from skillgraft.config import engine_settings
from skillgraft.core.sampling import SamplingOptions
from skillgraft.engine.llama import Engine, KVState
from skillgraft.errors import (
    BlockIntegrityError,
    ConfigError,
    ContextOverflowError,
    FingerprintMismatchError,
    InputError,
)

pytestmark = pytest.mark.model

PREFIX = "A git rebase rewrites a branch so that its commits sit on top of another base. " * 6
QUERY = " Question: what does it rewrite?"


def fresh_then_graft(engine, prefix_text=PREFIX, query_text=QUERY):
    query = engine.tokenize(query_text, add_bos=False)
    state = engine.capture(prefix_text)
    engine.append(query)
    fresh = engine.logits_bytes()
    grafted = engine.graft(state, query).astype(np.float32).tobytes()
    return state, fresh, grafted


def test_graft_at_own_position_is_byte_exact_on_smollm2(smollm2):
    _, fresh, grafted = fresh_then_graft(smollm2)
    assert fresh == grafted


def test_graft_is_byte_exact_on_gemma3_with_full_swa_cache(gemma3):
    assert gemma3.sliding_window == 512 and gemma3.swa_full and gemma3.fingerprint.swa_full
    _, fresh, grafted = fresh_then_graft(gemma3)
    assert fresh == grafted


def test_state_bytes_per_token_equal_the_kv_size_within_a_small_header(smollm2):
    state = smollm2.capture(PREFIX)
    one_more = smollm2.capture(list(state.tokens) + [state.tokens[-1]])
    assert one_more.n_bytes - state.n_bytes == smollm2.state_bytes_per_token
    assert 0 <= smollm2.state_bytes_per_token - smollm2.kv_bytes_per_token <= 16
    assert state.n_bytes == smollm2.state_size(state.n_tokens)
    assert state.n_bytes - state.n_tokens * smollm2.kv_bytes_per_token < 16 * state.n_tokens + 1024


def test_capture_is_deterministic(smollm2):
    assert smollm2.capture(PREFIX).sha256 == smollm2.capture(PREFIX).sha256


def test_shifted_graft_is_not_exact(smollm2):
    query = smollm2.tokenize(QUERY, add_bos=False)
    state = smollm2.capture(PREFIX)
    smollm2.append(query)
    fresh = smollm2.logits_bytes()
    smollm2.restore(state)
    smollm2.shift_positions(1)
    smollm2.append(query)
    assert smollm2.logits_bytes() != fresh


def test_generation_continues_after_a_graft(smollm2):
    state = smollm2.capture(PREFIX)
    smollm2.graft(state, QUERY)
    steps = list(smollm2.generate(SamplingOptions(5)))
    assert 1 <= len(steps) <= 5
    assert all(step.logprob <= 0 for step in steps)
    # every drawn token is evaluated but the last one of an answer cut at max_tokens (none follows it)
    drawn_after = len(steps) - (len(steps) == 5)
    assert smollm2.n_past == state.n_tokens + len(smollm2.tokenize(QUERY, add_bos=False)) + drawn_after


def test_flipped_byte_is_refused_before_llama_cpp(smollm2):
    state = smollm2.capture(PREFIX)
    flipped = bytearray(state.payload)
    flipped[len(flipped) // 2] ^= 0x01
    bad = KVState(state.tokens, bytes(flipped), state.sha256, state.fingerprint)
    with pytest.raises(BlockIntegrityError, match="SHA-256"):
        smollm2.graft(bad, QUERY, block_id="b1")


def test_truncated_payload_is_refused_with_sizes(smollm2):
    state = smollm2.capture(PREFIX)
    cut = KVState(state.tokens, state.payload[:-100], state.sha256, state.fingerprint)
    with pytest.raises(BlockIntegrityError, match=f"{state.n_bytes - 100} bytes but {state.n_tokens} tokens need"):
        smollm2.restore(cut)
    # The engine still works after the refusal.
    _, fresh, grafted = fresh_then_graft(smollm2)
    assert fresh == grafted


def test_fingerprint_mismatch_names_the_fields(smollm2):
    state = smollm2.capture(PREFIX)
    foreign = state.fingerprint.model_copy(update={"n_batch": 256, "flash_attn": True})
    moved = KVState(state.tokens, state.payload, state.sha256, foreign)
    with pytest.raises(FingerprintMismatchError, match="flash_attn.*n_batch") as info:
        smollm2.restore(moved, block_id="abc123")
    assert set(info.value.differences) == {"n_batch", "flash_attn"}
    assert "abc123" in str(info.value)


def test_state_from_another_model_is_refused(smollm2, gemma3):
    state = gemma3.capture(PREFIX)
    with pytest.raises(FingerprintMismatchError, match="gguf_sha256"):
        smollm2.graft(state, QUERY)


def test_state_from_another_context_shape_is_refused(smollm2):
    with Engine("smollm2-135m", engine_settings(n_batch=256, n_ubatch=256)) as other:
        state = other.capture(PREFIX)
    with pytest.raises(FingerprintMismatchError, match="n_batch"):
        smollm2.graft(state, QUERY)


def test_overlong_text_gives_the_numbers():
    with Engine("smollm2-135m", engine_settings(n_ctx=256)) as small:
        with pytest.raises(ContextOverflowError, match=r"is \d+ tokens but the context holds 256"):
            small.capture("word " * 400)


def test_empty_text_and_empty_query(smollm2):
    with pytest.raises(InputError):
        smollm2.capture("")
    state = smollm2.capture(PREFIX)
    with pytest.raises(InputError):
        smollm2.graft(state, [])


def test_sliding_window_model_refuses_a_reduced_cache():
    with pytest.raises(ConfigError, match="swa_full=True"):
        Engine("gemma3-270m", engine_settings(swa_full=False))


def test_repeat_penalty_changes_picks_but_not_reported_logprobs(smollm2):
    state = smollm2.capture("List: apple, apple, apple, apple, apple, apple,")
    smollm2.graft(state, " apple,")
    plain = list(smollm2.generate(SamplingOptions(12)))
    smollm2.graft(state, " apple,")
    penalised = list(smollm2.generate(SamplingOptions(12, repeat_penalty=1.5)))
    assert [s.token for s in plain] != [s.token for s in penalised]
    assert plain[0].token == penalised[0].token and plain[0].logprob == penalised[0].logprob


def test_characters_split_across_tokens_come_out_whole(smollm2):
    state = smollm2.capture("Repeat exactly: 🙂🙂🙂 😎🌟 café naïve")
    smollm2.graft(state, " Repeat exactly: 🙂🙂🙂 😎🌟 café naïve")
    text = "".join(step.piece for step in smollm2.generate(SamplingOptions(24)))
    assert "\ufffd" not in text


def test_long_texts_are_tokenized_once_and_the_kept_tokens_cannot_be_changed(smollm2):
    from skillgraft.engine import text as text_module

    text = "You are a careful agent. Keep every change small and tested. " * 40
    first = smollm2.tokenize(text)
    first.append(-1)  # a caller's change to its list is its own
    again = smollm2.tokenize(text)
    assert again == first[:-1] == smollm2.text._tokenize(text, True, True)
    assert (text, True, True) in smollm2.text._kept
    assert smollm2.tokenize(text, add_bos=False) == again[1:] or smollm2.tokenize(text, add_bos=False) == again
    for index in range(text_module.TOKENS_KEPT + 5):
        smollm2.tokenize(f"{index} " + text)
    assert len(smollm2.text._kept) == text_module.TOKENS_KEPT and (text, True, True) not in smollm2.text._kept


def test_a_grammar_that_parsed_is_not_parsed_again_and_a_bad_one_always_is(smollm2, monkeypatch):
    from skillgraft.errors import FormatError

    good, bad = 'root ::= "yes" | "no"', "root ::= ("
    smollm2.check_grammar(good)
    for _ in range(2):
        with pytest.raises(FormatError):
            smollm2.check_grammar(bad)
    compiled = []
    monkeypatch.setattr(smollm2.text, "grammar", lambda gbnf: compiled.append(gbnf))
    smollm2.check_grammar(good)
    assert compiled == []
