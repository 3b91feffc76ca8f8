import pytest

from skillgraft.errors import ConflictError, InputError, VerificationError
from skillgraft.flywheel import solve
from skillgraft.core.chat_layout import chat_tokens, continuation
from skillgraft.core.sampling import SamplingOptions
from skillgraft.verify.verifiers import ExactVerifier, NumericVerifier


def test_exact_hit_answers_with_zero_decoded_tokens_and_is_logged(stocked):
    result = stocked.generate("  what is 17*23 ")
    assert (result.decision, result.text, result.decoded_tokens) == ("exact", "391", 0)
    voiced = stocked.generate("What is 17 * 23?", voice=True)
    assert voiced.decision == "exact" and 1 <= voiced.decoded_tokens <= 8
    rows = stocked.store.ledger(2)
    assert rows[0]["event"] == "generate" and rows[0]["decision"] == "exact" and rows[0]["decoded_tokens"] == voiced.decoded_tokens


def test_graft_avoids_the_block_prefill_and_ledger_shows_it(stocked):
    stocked.store.set_setting("gate.mean_logprob", "-100")  # any answer is confident enough
    result = stocked.generate("how do I squash my last commits?", max_tokens=12)
    block = stocked.store.get("git-squash")
    assert result.recall.decision == result.decision == "graft"
    assert result.prefill_tokens_avoided == block.n_tokens and result.block_id == block.id
    assert result.gate.confident and not result.gate.fell_back and result.text
    row = stocked.store.ledger(1)[0]
    assert row["decision"] == result.decision and row["prefill_tokens_avoided"] == result.prefill_tokens_avoided


def test_graft_output_equals_a_fresh_prefill_of_the_same_tokens(stocked):
    engine = stocked.engine
    block = stocked.store.get("git-squash")
    result = stocked.generate("how do I squash my last commits?", max_tokens=8)
    full = chat_tokens(engine, [("system", block.source), ("user", "how do I squash my last commits?")])
    assert tuple(full[: block.n_tokens]) == block.tokens
    engine.prefill(full)
    fresh = [s.token for s in engine.generate(SamplingOptions(8))]
    assert [s.token for s in result.steps] == fresh


def test_unconfident_graft_falls_back_and_says_so(stocked):
    stocked.store.set_setting("gate.mean_logprob", "-0.0001")
    advisory = stocked.generate("how do I squash my last commits?", max_tokens=8)
    assert advisory.decision == "graft" and not advisory.gate.confident and not advisory.gate.fell_back
    result = stocked.generate("how do I squash my last commits?", max_tokens=8, gate="enforce")
    assert result.decision == "fallback" and result.gate.fell_back is True
    assert result.block_id == stocked.store.get("git-squash").id and result.recall.decision == "graft"
    assert "not confident" in result.gate.reason


def test_off_topic_query_abstains(stocked):
    result = stocked.generate("Who painted the Mona Lisa?", max_tokens=8)
    assert result.decision == "abstain" and result.block_id is None
    # Nothing of a block: at most what the context already held of this prompt (its opening tokens).
    assert result.note.reused_from in ("", "slot") and result.prefill_tokens_avoided == result.note.cache_n


@pytest.mark.sandbox
def test_wrong_answer_is_refused_and_nothing_stored(memory):
    with pytest.raises(VerificationError, match="printed '391'"):
        memory.add_solution("What is 17 * 23?", "392", method="print(17 * 23)", verifier="python")
    with pytest.raises(VerificationError):
        memory.add_solution("Capital of France?", "Lyon", verifier=ExactVerifier("Paris"))
    with pytest.raises(VerificationError):
        memory.add_solution("Half of 3?", "1.6", verifier=NumericVerifier(1.5))
    with pytest.raises(VerificationError):
        memory.add_solution("Is it ok?", "yes", verifier=lambda q, a, m: False)
    assert len(memory.store) == 0


def test_verifier_is_required_and_ground_truth_too(memory):
    with pytest.raises(InputError, match="verifier is required"):
        memory.add_solution("What is 2+2?", "4")
    with pytest.raises(InputError, match="expected"):
        memory.add_solution("What is 2+2?", "4", verifier="exact")


def test_conflicting_answer_is_an_error_not_an_overwrite(stocked):
    with pytest.raises(ConflictError, match="391"):
        stocked.add_solution("what is 17*23", "400", verifier=lambda q, a, m: True)
    assert stocked.generate("What is 17 * 23?").text == "391"


def test_solve_deposits_the_solvers_verified_answer_then_answers_by_lookup(memory):
    problem = "What is the sum of the first 100 positive integers?"
    result = solve(memory, problem, NumericVerifier(5050), samples=1, max_tokens=16,
                   solver=lambda p: ("5050", "print(sum(range(1, 101)))"))
    assert result.verified and result.answer == "5050"
    assert [s["stage"] for s in result.stages][:2] == ["base", "best-of-n"]
    again = solve(memory, problem, NumericVerifier(5050))
    assert again.decision == "exact" and again.stages == [{"stage": "exact", "decoded_tokens": 0}]
    assert memory.store.ledger(1)[0]["event"] in {"solve", "recall"}


def test_solve_without_a_verified_answer_stores_nothing(memory):
    result = solve(memory, "What is 123456 * 654321?", NumericVerifier(123456 * 654321), samples=1, max_tokens=8)
    assert not result.verified and len(memory.store) == 0


def test_a_named_block_is_grafted_through_the_pipeline_and_equals_a_fresh_prefill(stocked):
    from skillgraft import AnswerOptions
    from skillgraft.core.sampling import SamplingOptions

    engine = stocked.engine
    block = stocked.store.get("git-squash")
    messages = [("user", "hi"), ("assistant", "Hello!"), ("user", "how do I squash commits?")]
    answer = stocked.answer(messages, AnswerOptions(max_tokens=6), block="git-squash")
    assert answer.note.decision == "graft" and answer.note.block_id == block.id
    keep, after = continuation(engine, block, messages)
    assert answer.note.cache_n == keep
    engine.prefill(list(block.tokens[:keep]) + after)
    assert [s.token for s in answer.end.steps] == [s.token for s in engine.generate(SamplingOptions(6))]
    with pytest.raises(InputError, match="not both"):
        stocked.answer(messages, block="git-squash", recall=answer.recall)


def test_calibrate_gate_keeps_every_right_answer(stocked):
    cases = [("how do I squash my commits with git?", "git-squash", "git"),
             ("how do I squash my commits with git?", "sourdough", "git rebase")]
    report = stocked.confidence_gate.calibrate(cases, max_tokens=12)
    assert report.right >= 1 and report.cases == 2
    kept = [r.mean_logprob for r in report.rows if r.correct]
    assert all(v >= report.threshold for v in kept)
    assert stocked.confidence_gate.threshold == report.threshold
    with pytest.raises(InputError, match="no grafted answer was right"):
        stocked.confidence_gate.calibrate([("how do I squash my commits?", "sourdough", "zzz-never")], max_tokens=4)


def test_foreign_block_raises_or_is_reprefilled_when_allowed(stocked, embedder):
    from skillgraft.config import engine_settings
    from skillgraft.engine.llama import Engine
    from skillgraft.errors import FingerprintMismatchError
    from skillgraft.memory import SkillMemory

    with Engine("smollm2-135m", engine_settings(n_batch=256, n_ubatch=256)) as smaller:
        strict = SkillMemory(stocked.store.home, engine=smaller, embedder=embedder)
        with pytest.raises(FingerprintMismatchError, match="n_batch"):
            strict.generate("how do I squash my last commits?", max_tokens=4, gate=False)
        strict.close()
        lenient = SkillMemory(stocked.store.home, engine=smaller, embedder=embedder, reprefill_foreign=True)
        result = lenient.generate("how do I squash my last commits?", max_tokens=4, gate=False)
        assert result.decision == "graft" and result.prefill_tokens_avoided == 0 and result.timings.reprefilled
        lenient.close()


def test_a_derived_state_read_from_disk_after_a_restart_answers_as_a_prefill(tmp_path, smollm2, embedder, monkeypatch):
    """On the embedded model: a derived state found on disk is a file reference, read once where
    it is restored, and the answer is the one a prefill of the whole prompt gives."""
    from skillgraft.core.states import FileRef
    from skillgraft.memory import SkillMemory

    from .conftest import GIT_MANUAL
    from .unit.test_prefix_reuse import OPTIONS, QUESTIONS, chat

    home = tmp_path / "store"
    with SkillMemory(home, engine=smollm2, embedder=embedder) as memory:
        memory.add_manual("git-squash", GIT_MANUAL, examples=QUESTIONS[:2])
        memory.answer(chat(QUESTIONS[2]), OPTIONS)
        memory.answer(chat(QUESTIONS[3]), OPTIONS)
        assert memory.states.flush() == 1
    reads, read = [], FileRef.read
    monkeypatch.setattr(FileRef, "read", lambda ref: reads.append(ref) or read(ref))
    smollm2.reset()
    with SkillMemory(home, engine=smollm2, embedder=embedder) as restarted:
        answer = restarted.answer(chat(QUESTIONS[4]), OPTIONS)
        assert answer.note.reused_from == "derived" and answer.note.cache_n > 100 and len(reads) == 1
    smollm2.reset()
    with SkillMemory(home, engine=smollm2, embedder=embedder, derived_bytes=0) as plain:
        fresh = plain.answer(chat(QUESTIONS[4]), OPTIONS)
        assert fresh.note.reused_from != "derived"
    assert [s.token for s in answer.end.steps] == [s.token for s in fresh.end.steps]
