"""One answer type: ``generate`` returns the :class:`Answer` every answering verb returns, read
by the names the old ``Generation`` had; ``Generation`` and ``generation_of`` stay one release,
warned."""

from __future__ import annotations

import pytest

import skillgraft
from skillgraft import Answer
from skillgraft.memory import SkillMemory
from skillgraft.testing import FakeEmbedder, FakeEngine


def test_generate_returns_an_answer_read_by_the_old_names(tmp_path):
    with SkillMemory(tmp_path, engine=FakeEngine(), embedder=FakeEmbedder()) as memory:
        memory.add_solution("What is 17 * 23?", "391", method="17 * 23", verifier="exact", expected="391")
        exact = memory.generate("What is 17 * 23?")
        assert isinstance(exact, Answer) and (exact.text, exact.decision) == ("391", "exact")
        assert exact.block_id == exact.note.block_id and exact.decoded_tokens == exact.end.completion_tokens == 0
        plain = memory.generate("hello there", max_tokens=3)
        assert plain.decision == "abstain" and plain.steps == list(plain.end.steps) and plain.timings is plain.end.timings
        data = plain.as_dict()
        assert {"text", "decision", "block_id", "decoded_tokens", "prefill_tokens_avoided", "timings", "recall", "gate",
                "reason", "finish_reason"} <= set(data) and data["recall"]["decision"] == "abstain"


def test_the_old_names_are_warned_aliases():
    with pytest.warns(DeprecationWarning, match="generate returns an Answer"):
        assert skillgraft.Generation is Answer
    from skillgraft import memory

    with pytest.warns(DeprecationWarning):
        assert memory.generation_of("x") == "x"
    with pytest.raises(AttributeError):
        skillgraft.NoSuchName  # noqa: B018
