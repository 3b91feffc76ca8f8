"""The text of a skill for a host's own model (skill_text, recall_text) and the decision headers, on the fakes."""

from __future__ import annotations

import pytest

from skillgraft.core.skill_text import USE, recall_text, skill_text
from skillgraft.errors import BlockNotFoundError, InputError

from .conftest import ANSWER, GIT_MANUAL, GIT_QUERY, OUT_OF_DOMAIN, QUESTION


def test_a_manual_reads_as_its_text_and_examples(fake_stocked):
    skill = skill_text(fake_stocked, "git-squash")
    assert (skill.kind, skill.text, skill.name) == ("manual", GIT_MANUAL, "git-squash")
    assert skill.examples == ["how do I squash my last commits?", "combine commits into one"]
    assert skill.question is skill.answer is skill.method is None
    assert skill.n_tokens == fake_stocked.blocks.get("git-squash").n_tokens


def test_a_solution_reads_as_its_question_answer_method_and_verifier(fake_stocked):
    skill = skill_text(fake_stocked, QUESTION)  # by its question, as every memory verb
    assert (skill.kind, skill.question, skill.answer, skill.method, skill.verifier) == (
        "solution", QUESTION, ANSWER, "17 * 23", "exact")
    assert skill.examples == []  # the question itself is a routing key, not an example
    assert QUESTION in skill.text and ANSWER in skill.text


def test_recall_text_carries_the_decision_and_what_to_use(fake_stocked):
    exact = recall_text(fake_stocked, "what is 17*23")
    assert (exact.decision, exact.answer, exact.use) == ("exact", ANSWER, USE["exact"])
    assert exact.skill.answer == ANSWER and exact.block_id == exact.skill.id
    graft = recall_text(fake_stocked, GIT_QUERY)
    assert graft.decision == "graft" and graft.answer is None and not graft.near_miss
    assert graft.skill.text == GIT_MANUAL and graft.block_name == "git-squash" and graft.use == USE["graft"]
    assert graft.score >= graft.threshold and graft.reason
    abstain = recall_text(fake_stocked, OUT_OF_DOMAIN)
    assert (abstain.decision, abstain.skill, abstain.block_id, abstain.use) == ("abstain", None, None, USE["abstain"])
    assert abstain.reason


def test_a_near_miss_says_its_answer_is_not_this_questions(fake_stocked):
    found = recall_text(fake_stocked, "What is 17 * 24?")
    assert found.decision == "graft", "the fake embedder no longer routes this near miss"
    assert found.near_miss and found.answer is None and found.use == USE["near_miss"]
    assert found.skill.kind == "solution"


@pytest.mark.parametrize("ref", ["no-such-skill", "0123456789abcdef"])
def test_an_unknown_skill_is_block_not_found(fake_stocked, ref):
    with pytest.raises(BlockNotFoundError):
        skill_text(fake_stocked, ref)


@pytest.mark.parametrize("query", ["", "   ", "a\x00b", b"\xff"])
def test_a_hostile_query_is_an_input_error(fake_stocked, query):
    with pytest.raises(InputError):
        recall_text(fake_stocked, query)


def test_decision_headers_of_a_chat_and_of_a_recall(fake_stocked):
    from skillgraft.core.answer import AnswerNote
    from skillgraft.gateway.skills_api import decision_headers

    note = AnswerNote("graft", "graft", "b6f0aa", "git-squash/ü", 0.71234567, 0.3, "routed", cache_n=53)
    assert decision_headers(note) == {
        "x-skillgraft-decision": "graft", "x-skillgraft-score": "0.712346", "x-skillgraft-block": "b6f0aa",
        "x-skillgraft-block-name": "git-squash%2F%C3%BC", "x-skillgraft-cache-n": "53",
    }
    abstain = decision_headers(recall_text(fake_stocked, OUT_OF_DOMAIN))
    assert abstain["x-skillgraft-decision"] == "abstain" and "x-skillgraft-block" not in abstain
    assert all(value.isascii() for value in abstain.values())
