"""Recall and generation of SkillMemory on the fakes: exact, graft, abstain, the gate, near misses."""

from __future__ import annotations

import json

import pytest

from skillgraft.errors import FingerprintMismatchError, InputError
from skillgraft.memory import SkillMemory
from skillgraft.testing import FakeEngine

from .conftest import ANSWER, GIT_MANUAL, GIT_QUERY, OUT_OF_DOMAIN

GIT_REPLY = "Run git rebase -i HEAD~3 and squash."
PLAIN_REPLY = "I do not know."


def replies(prompt: str) -> str:
    """What the fake model says: it has read the git manual only when that manual is in its context."""
    if "Verified solution" in prompt:
        return f"The answer is {ANSWER}."  # a near miss would copy the stored answer
    return GIT_REPLY if "squashing commits" in prompt else PLAIN_REPLY


def generated_context(engine: FakeEngine, messages) -> tuple[list[int], list[int]]:
    """(what the context holds after the last generation, a fresh prefill of the same chat), same length."""
    prompt = engine.tokenize(engine.chat_prompt(messages))
    return engine.context_tokens[: len(prompt)], prompt


def test_a_recurring_question_is_answered_by_lookup_without_the_engine(fake_stocked, fake_engine):
    recall = fake_stocked.recall("what is 17*23")
    assert recall.decision == "exact" and recall.block.answer == ANSWER
    before = dict(fake_engine.calls)
    result = fake_stocked.generate("  What is 17*23 ")
    assert (result.decision, result.text, result.decoded_tokens) == ("exact", ANSWER, 0)
    assert dict(fake_engine.calls) == before


def test_a_routed_query_grafts_the_manual_and_equals_a_fresh_prefill(fake_stocked, fake_engine):
    fake_engine.reply = replies
    recall = fake_stocked.recall(GIT_QUERY)
    assert recall.decision == "graft" and recall.block.name == "git-squash" and not recall.near_miss
    result = fake_stocked.generate(GIT_QUERY)
    assert (result.decision, result.text) == ("graft", GIT_REPLY)
    assert result.block_id == recall.block.id
    assert result.prefill_tokens_avoided == recall.block.n_tokens
    assert result.gate.confident and not result.gate.fell_back
    assert fake_engine.calls["graft"] == 1
    held, fresh = generated_context(fake_engine, [("system", GIT_MANUAL), ("user", GIT_QUERY)])
    assert held == fresh
    assert set(result.timings.as_dict()) == {"recall_s", "load_s", "from_cache", "graft_s", "generate_s", "total_s"}
    assert result.timings.total_s >= result.timings.graft_s + result.timings.generate_s


def test_an_out_of_domain_query_abstains_and_generates_plainly(fake_stocked, fake_engine):
    fake_engine.reply = replies
    recall = fake_stocked.recall(OUT_OF_DOMAIN)
    assert recall.decision == "abstain" and recall.block is None and recall.score < recall.threshold
    result = fake_stocked.generate(OUT_OF_DOMAIN)
    assert (result.decision, result.text) == ("abstain", PLAIN_REPLY)
    # Nothing of a block: only what the context already held of this prompt is reused.
    assert result.prefill_tokens_avoided == result.note.cache_n and result.note.reused_from in ("", "slot")
    assert fake_engine.calls["graft"] == 0
    assert set(result.timings.as_dict()) == {"recall_s", "plain_prefill_s", "plain_generate_s", "total_s"}


def test_an_unconfident_graft_falls_back_to_plain_generation(fake_stocked, fake_engine):
    fake_engine.reply = lambda prompt: None if "squashing commits" in prompt else PLAIN_REPLY
    block = fake_stocked.blocks.get("git-squash")
    result = fake_stocked.generate(GIT_QUERY, gate="enforce")
    assert (result.decision, result.block_id, result.text) == ("fallback", block.id, PLAIN_REPLY)
    assert result.gate.fell_back and not result.gate.confident
    assert result.gate.reason.startswith("graft not confident")
    assert result.recall.decision == "graft" and result.note.routed == "graft"
    advisory = fake_stocked.generate(GIT_QUERY)  # the default reports the confidence, never discards
    assert advisory.decision == "graft" and not advisory.gate.fell_back and not advisory.gate.confident


@pytest.mark.parametrize("gate", ["enforce", "advisory"])
def test_a_near_miss_never_repeats_the_stored_answer(fake_stocked, fake_engine, gate):
    fake_engine.reply = replies
    recall = fake_stocked.recall("What is 17 * 24?")
    assert recall.decision == "graft" and recall.near_miss and recall.block.answer == ANSWER
    assert "near miss" in recall.reason
    result = fake_stocked.generate("What is 17 * 24?", gate=gate)
    assert fake_engine.calls["generate"] == 2  # the block was grafted, and its answer repeated ...
    assert result.gate.fell_back and result.gate.reason.startswith("near miss")
    assert (result.decision, result.text) == ("fallback", PLAIN_REPLY)  # ... so it was generated plainly
    assert result.block_id == recall.block.id
    assert ANSWER not in result.text


def test_the_apps_system_prompt_leads_and_the_block_follows_it(fake_stocked, fake_engine):
    fake_engine.reply = replies
    block = fake_stocked.blocks.get("git-squash")
    result = fake_stocked.generate(GIT_QUERY, system="Answer in one line.")
    assert (result.decision, result.text) == ("graft", GIT_REPLY)
    held, fresh = generated_context(
        fake_engine, [("system", "Answer in one line."), ("system", GIT_MANUAL), ("user", GIT_QUERY)]
    )
    assert held == fresh
    assert fake_stocked.recall(GIT_QUERY).block.id == block.id  # the system prompt never changes the route
    with pytest.raises(InputError):
        fake_stocked.generate(GIT_QUERY, system="  ")


def test_chat_with_a_block_streams_what_a_plain_chat_streams(fake_stocked, fake_engine):
    messages = [("system", GIT_MANUAL), ("user", "hello"), ("assistant", "hi"), ("user", GIT_QUERY)]
    from skillgraft import AnswerOptions
    from skillgraft.core.planning import forced_recall

    options = AnswerOptions(max_tokens=12)
    unrouted = forced_recall(None, fake_stocked.router.threshold, "no recall")
    plain = fake_stocked.answer(messages, options, recall=unrouted)
    grafted = fake_stocked.answer(messages[1:], options, block="git-squash")
    assert plain.note.decision == "abstain" and grafted.note.decision == "graft"
    assert [(s.token, s.logprob) for s in grafted.end.steps] == [(s.token, s.logprob) for s in plain.end.steps]
    assert grafted.note.cache_n > 0 and grafted.note.reused_from in ("block", "slot")
    with pytest.raises(InputError):
        fake_stocked.answer([], block="git-squash")
    for content in ("a\x00b", "a\ud800b"):  # a NUL byte, a lone surrogate
        with pytest.raises(InputError, match="user message"):
            fake_stocked.answer([("user", content)], block="git-squash")


def test_a_block_of_another_runtime_raises_unless_reprefilled(fake_stocked, fake_embedder):
    home = fake_stocked.store.home
    fake_stocked.close()
    other = FakeEngine(n_batch=256, reply=replies)
    with SkillMemory(home, engine=other, embedder=fake_embedder) as mem:
        with pytest.raises(FingerprintMismatchError, match="n_batch"):
            mem.generate(GIT_QUERY)
    with SkillMemory(home, engine=other, embedder=fake_embedder, reprefill_foreign=True) as mem:
        result = mem.generate(GIT_QUERY)
        assert (result.decision, result.text, result.prefill_tokens_avoided) == ("graft", GIT_REPLY, 0)
        assert result.timings.reprefilled


def test_every_recall_and_generation_is_logged(fake_stocked):
    fake_stocked.recall(OUT_OF_DOMAIN)
    fake_stocked.generate("what is 17*23")
    events = [row["event"] for row in fake_stocked.store.ledger()]
    assert events.count("recall") == 1 and events.count("generate") == 1
    timings = [json.loads(row["timings"]) for row in fake_stocked.store.ledger()]
    assert {"recall_s"} in [set(t) for t in timings] and {"recall_s", "total_s"} in [set(t) for t in timings]


def test_an_embedder_must_have_a_name_and_encode(tmp_path, fake_engine):
    with pytest.raises(InputError, match="embedder"):
        SkillMemory(tmp_path / "s", engine=fake_engine, embedder=object())
    assert not (tmp_path / "s").exists()
