"""Questions and answers as text, without a model: the recurrence key folds form, not meaning;
answers match by what they say; a repeated answer is a whole number said again."""

from __future__ import annotations

import pytest

from skillgraft.core.gate import repeats_answer
from skillgraft.core.questions import normalize_question
from skillgraft.flywheel import extract_answer
from skillgraft.verify.verifiers import answers_match


@pytest.mark.parametrize(
    "a, b",
    [("What is 1,000 + 2.50?", "what is 1,000+2.50"), ("How  do I squash commits??", "how do I squash commits"),
     ("What is 17 * 23?", "what is 17*23")],
)
def test_normalization_folds_form_not_meaning(a, b):
    assert normalize_question(a) == normalize_question(b)


def test_normalization_keeps_operators():
    assert normalize_question("what is 17+23") != normalize_question("what is 17*23")


def test_answer_helpers():
    assert answers_match("5050", "5,050") and answers_match("Paris", " paris ") and not answers_match("1", "2")
    assert extract_answer("The answer is 1,234.") == "1234"
    assert extract_answer("Paris\nis the capital") == "Paris"


def test_repeats_answer_matches_whole_numbers_only():
    assert repeats_answer("37 * 44 = 1591", "1591")
    assert repeats_answer("It is 1,591.", "1591")
    assert not repeats_answer("It is 15910.", "1591") and not repeats_answer("0.1591", "1591")
    # Echoing a number of the question is not a copy; stating it once more is.
    assert not repeats_answer("144 times 12 is 1728", "12", "What is 144 times 12?")
    assert repeats_answer("144 times 12 is 12", "12", "What is 144 times 12?")
