"""Learning from verified answers: a verified question becomes experience of the skills its
answer used (one more routing key of each, recording the solution), its answer is given again
only for the same question, and the nearest verified examples go beside a grafted skill, after
its prefix state; nothing unverified is stored."""

from __future__ import annotations

import pytest

from skillgraft import AnswerOptions
from skillgraft.core.placement import EXAMPLES_HEADING
from skillgraft.errors import InputError, VerificationError
from skillgraft.memory import SkillMemory
from skillgraft.routing.experience import EXPERIENCE, SOLUTION_ORIGIN
from skillgraft.testing import FakeEmbedder, FakeEngine

OPTIONS = AnswerOptions(max_tokens=4)
APP = "You are a helpful assistant."
SQUASH = "Squash commits: git rebase -i HEAD~3, mark commits as squash, then save."
BREAD = "Proof sourdough bread for 4 hours at room temperature."
LEARNED = "combine my three newest commits on the feature branch"
NEAR = "combine my two newest commits on the release branch"
ANSWER = "git rebase -i HEAD~3"


def open_memory(home) -> SkillMemory:
    memory = SkillMemory(home, engine=FakeEngine(), embedder=FakeEmbedder())
    memory.add_manual("git-squash", SQUASH, examples=["squash my last commits with git"], capture=False)
    memory.add_manual("sourdough", BREAD, examples=["how long should sourdough bread proof?"], capture=False)
    return memory


def test_a_verified_answer_becomes_experience_of_the_skill_it_used(tmp_path):
    with open_memory(tmp_path) as memory:
        skill = memory.blocks.get("git-squash")
        solution = memory.learn(LEARNED, ANSWER, skills=[skill], verifier="exact", expected=ANSWER)
        assert solution.kind == "solution" and solution.answer == ANSWER
        assert memory.store.routing_keys(solution.id) == []  # routing never grafts the solution itself
        keys = [k for k in memory.store.routing_keys(skill.id) if k["kind"] == EXPERIENCE]
        assert [(k["text"], k["created_by"]) for k in keys] == [(LEARNED, f"{SOLUTION_ORIGIN}{solution.id}")]
        assert memory.learn(LEARNED, ANSWER, skills=[skill], verifier="exact", expected=ANSWER).id == solution.id
        assert len([k for k in memory.store.routing_keys(skill.id) if k["kind"] == EXPERIENCE]) == 1
        assert {"solution", "experience"} <= {e["decision"] for e in memory.store.ledger() if e["event"] == "deposit"}


def test_nothing_unverified_is_stored(tmp_path):
    with open_memory(tmp_path) as memory:
        before = len(memory.store.blocks())
        with pytest.raises(VerificationError):
            memory.learn(LEARNED, "git push", skills=["git-squash"], verifier="exact", expected=ANSWER)
        with pytest.raises(InputError):
            memory.learn(LEARNED, ANSWER, skills=["git-squash"], verifier=None)
        assert len(memory.store.blocks()) == before
        assert not [k for k in memory.store.routing_keys() if k["kind"] == EXPERIENCE]
        solution = memory.learn(LEARNED, ANSWER, skills=[], verifier="exact", expected=ANSWER)
        with pytest.raises(InputError):
            memory.learn(NEAR, ANSWER, skills=[solution], verifier="exact", expected=ANSWER)
        with pytest.raises(InputError):
            memory.learn(NEAR, ANSWER, skills="git-squash", verifier="exact", expected=ANSWER)


def test_a_near_question_gets_the_skill_and_the_example_never_the_answer(tmp_path):
    with open_memory(tmp_path) as memory:
        plain = memory.recall(NEAR, log=False)
        assert plain.examples == () and "examples" not in plain.as_dict()
        solution = memory.learn(LEARNED, ANSWER, skills=["git-squash"], verifier="exact", expected=ANSWER)
        near = memory.recall(NEAR, log=False)
        assert near.decision == "graft" and near.block_name == "git-squash" and not near.near_miss
        assert near.score > plain.score  # the verified question is evidence for its skill
        assert [b.id for b in near.examples] == [solution.id]
        assert near.as_dict()["examples"] == [{"block_id": solution.id, "question": LEARNED}]
        assert memory.recall(LEARNED.upper(), log=False).decision == "exact"  # the same question: its answer

        chat = [("system", APP), ("user", NEAR)]
        prompt = memory.pipeline().prompt(memory.plan(chat), OPTIONS)
        text = memory.engine.detokenize(list(prompt.tokens))
        assert text.index(APP) < text.index(SQUASH) < text.index(EXAMPLES_HEADING) < text.index(LEARNED) < text.index(NEAR)
        assert EXAMPLES_HEADING not in memory.engine.detokenize(list(prompt.tokens[:prompt.mark]))
        assert SQUASH in memory.engine.detokenize(list(prompt.tokens[:prompt.mark]))
        answer = memory.answer(chat, OPTIONS)
        assert answer.note.decision == "graft" and answer.note.block_name == "git-squash" and answer.text != ANSWER


def test_examples_only_in_a_chat_of_one_question_and_gone_with_their_solution(tmp_path):
    with open_memory(tmp_path) as memory:
        solution = memory.learn(LEARNED, ANSWER, skills=["git-squash"], verifier="exact", expected=ANSWER)
        chat = [("system", APP), ("user", "hello"), ("assistant", "hi"), ("user", NEAR)]
        text = memory.engine.detokenize(list(memory.pipeline().prompt(memory.plan(chat), OPTIONS).tokens))
        assert SQUASH in text and EXAMPLES_HEADING not in text
        memory.blocks.delete(solution.id)
        assert not [k for k in memory.store.routing_keys() if k["kind"] == EXPERIENCE]
        near = memory.recall(NEAR, log=False)
        assert near.examples == ()


def test_a_solution_learned_with_no_skill_changes_no_route(tmp_path):
    with open_memory(tmp_path) as memory:
        queries = (NEAR, "proof my bread", "what is the weather?")
        before = [memory.recall(q, log=False).as_dict() for q in queries]
        memory.learn(LEARNED, ANSWER, skills=[], verifier="exact", expected=ANSWER)
        assert [memory.recall(q, log=False).as_dict() for q in queries] == before
        assert memory.recall(LEARNED, log=False).decision == "exact"
