"""Numbers in answers: an answer is never verified by a number it does not say."""

from __future__ import annotations

import pytest

from skillgraft.verify.verifiers import NumericVerifier, answers_match


@pytest.mark.parametrize(
    "expected, answer",
    [("5050", "5,050"), ("1234567.5", "1,234,567.5"), ("-1000", "-1,000"), ("391", "391."), ("3.91", "3.910"), ("1000", "1e3")],
)
def test_the_same_number_written_otherwise_matches(expected, answer):
    assert answers_match(expected, answer) and answers_match(answer, expected)
    assert NumericVerifier(expected).check("q", answer, None).ok


@pytest.mark.parametrize(
    "expected, answer",
    [("391", "39,1"), ("391", "3,91"), ("391", "3,9,1"), ("12", "1,2"), ("391", "3_91"), ("inf", "1e400"), ("1e400", "1e500")],
)
def test_a_comma_decimal_or_another_spelling_is_not_that_number(expected, answer):
    assert not answers_match(expected, answer) and not answers_match(answer, expected)
    if expected != "inf" and expected != "1e400":
        assert not NumericVerifier(expected).check("q", answer, None).ok
