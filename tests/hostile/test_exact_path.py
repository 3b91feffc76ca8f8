"""The exact path answers only the very question that was verified.

Two questions that differ in any symbol that can change the answer never share a key, so a
stored verified answer is never returned for another question.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skillgraft.core.questions import normalize_question

# Each pair once shared a key, and the stored answer of one came back [exact] for the other.
COLLISIONS = [
    ("Is 3 ≤ 5?", "Is 3 ≥ 5?"),
    ("What is 2³?", "What is 23?"),
    ("What is 5!?", "What is 5?"),
    ("What is ~5?", "What is 5?"),
    ("Simplify A & B", "Simplify A | B"),
    ("What is 2²?", "What is 22?"),
    ("What is ½ of 10?", "What is 1/2 of 10?"),
    ("What is 1,5 + 1?", "What is 15 + 1?"),
    ("What is 2.50 * 2?", "What is 2.5 * 2?"),
    ("What is 3 − 1?", "What is 3 - 1?"),
    ("What is 7 mod 3?", "What is 7 mod 4?"),
    ("ASCII code of 'A'?", "ASCII code of 'a'?"),
    ("What is 1 2?", "What is 12?"),
    ("What is $5 + 3?", "What is 5 + 3?"),
    ("What is 10 # 3?", "What is 10 @ 3?"),
    ("Is ∀x P(x)?", "Is ∃x P(x)?"),
]


@pytest.mark.parametrize("first, second", COLLISIONS)
def test_known_collisions_get_different_keys(first, second):
    assert normalize_question(first) != normalize_question(second)


@pytest.mark.parametrize(
    "first, second",
    [("What is 17 * 23?", "what is 17*23"), ("  What   is 17*23 ?? ", "WHAT IS 17 * 23"),
     ("What\u200b is 17 * 23?", "What is 17 * 23"),
     ("A box holds 24 eggs. How many eggs are in 9 boxes?", "a box holds 24 eggs!  how many eggs are in 9 boxes"),
     ("Simplify A & B", "simplify a & b")],
)
def test_form_alone_still_recurs(first, second):
    assert normalize_question(first) == normalize_question(second)


OPERANDS = st.integers(min_value=0, max_value=10_000)
SYMBOLS = st.sampled_from(list("+-*/^%<>=≤≥≠±×÷!~&|²³√∑∏.,:;$#@'\"()[]{}") + ["**", "//", "<<", ">>", "mod"])


@settings(max_examples=300, deadline=None)
@given(a=OPERANDS, b=OPERANDS, op1=SYMBOLS, op2=SYMBOLS)
def test_changing_an_operator_changes_the_key(a, b, op1, op2):
    if op1 == op2:
        return
    assert normalize_question(f"What is {a} {op1} {b}?") != normalize_question(f"What is {a} {op2} {b}?")


@settings(max_examples=300, deadline=None)
@given(a=OPERANDS, b=OPERANDS, c=OPERANDS, op=SYMBOLS)
def test_changing_an_operand_changes_the_key(a, b, c, op):
    if b == c:
        return
    assert normalize_question(f"What is {a} {op} {b}?") != normalize_question(f"What is {a} {op} {c}?")


@settings(max_examples=200, deadline=None)
@given(text=st.text(min_size=1, max_size=40), symbol=st.characters(categories=["Sm", "Sc", "So", "Po", "No", "Nl"]))
def test_inserting_a_visible_symbol_changes_the_key(text, symbol):
    base = f"What is {text}"
    if normalize_question(base) == "" or symbol in "?？":
        return
    assert normalize_question(base + " 7") != normalize_question(base + f" {symbol}7")


def test_racing_deposits_of_different_answers_do_not_both_win(stocked):
    """Conflicts are decided inside the catalog's write transaction (see tests/hostile/test_store.py
    for two racing processes); here the facade refuses a second answer."""
    from skillgraft.errors import ConflictError

    with pytest.raises(ConflictError):
        stocked.add_solution("what is 17*23", "390", verifier=lambda q, a, m: True)
    assert stocked.generate("What is 17 * 23?").text == "391"
