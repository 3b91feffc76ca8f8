"""The safe pattern subset: the same answers as ``re`` where both accept a pattern, refusals with
a reason, and time bounded by the text and the program, whatever the pattern."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skillgraft.core.safe_pattern import MAX_PATTERN_CHARS, MAX_STEPS, SafePattern
from skillgraft.errors import InputError

AGREE = [
    (r"CREATE INDEX\s+CONCURRENTLY", "use CREATE INDEX  CONCURRENTLY here"),
    (r"CREATE INDEX\s+CONCURRENTLY", "use CREATE INDEX here"),
    (r"^\s*#", "  # a heading"),
    (r"^#", "text\n# not at the start"),
    (r"\d{1,3}(,\d{3})*", "total 1,234,567"),
    (r"[\w.-]+@[\w-]+\.\w+", "write to a.b@c-d.io"),
    (r"\bsep=';'", "read_csv(path, sep=';', decimal=',')"),
    (r"colou?r", "the color"),
    (r"x{2,}", "a xx b"),
    (r"x{,2}y", "y"),
    (r"^x{,}$", "xxxx"),
    (r"^x{,}y", "x{,}y"),
    (r"^x{}$", "x{}"),
    (r"^x{,}?$", ""),
    (r"(?:ab|cd)+e", "abcdabe"),
    (r"[^a-z ]", "only lower case"),
    (r"[]a]", "]"),
    (r"a.c", "a\nc"),
    (r"a{", "a{"),
    (r"\.\*", "literally .*"),
    (r"end$", "the end"),
    (r"\Bx", "ax"),
    (r"", ""),
]


@pytest.mark.parametrize("pattern,text", AGREE)
def test_the_subset_answers_as_re_does(pattern, text):
    assert SafePattern(pattern).search(text) == (re.search(pattern, text) is not None)


def test_ignore_case_covers_literals_and_classes():
    assert SafePattern("concurrently", ignore_case=True).search("CREATE INDEX CONCURRENTLY")
    assert SafePattern("[a-c]+Z", ignore_case=True).search("ABCz")
    assert not SafePattern("concurrently").search("CONCURRENTLY")


@pytest.mark.parametrize("pattern,reason", [
    (r"(a)\1", "backreferences"), (r"(?=a)", "lookarounds"), (r"(?<!a)b", "lookarounds"), (r"(?P<n>a)", "names"),
    (r"(?i)a", "flags"), (r"a**", "multiple repeat"), (r"a++", "multiple repeat"), (r"*a", "nothing to repeat"),
    (r"(a", "not closed"), (r"a)", "unbalanced"), (r"[a", "not closed"), (r"[z-a]", "bad class range"),
    (r"a{200}", "over 100"), (r"a{3,1}", "bad repeat"), (r"\x41", "not supported"), ("a\\", "lone backslash"),
    (r"^*", "cannot be repeated"), (r"(a{100}){100}", "instructions"), ("a" * (MAX_PATTERN_CHARS + 1), "characters"),
])
def test_what_is_outside_the_subset_is_refused_with_the_reason(pattern, reason):
    with pytest.raises(InputError, match=reason):
        SafePattern(pattern)


def test_a_pattern_must_be_text():
    with pytest.raises(InputError, match="must be a string"):
        SafePattern(["a"])


@pytest.mark.parametrize("pattern", [r"(a+)+$", r"(a|aa)*b", r"(a*)*b", r"(\w+\s?)+$", r"(.*a){12}b"])
def test_patterns_that_make_re_backtrack_for_ever_take_linear_time(pattern):
    text = "a" * 3_000 + "!"
    started = time.perf_counter()
    assert SafePattern(pattern).search(text) is False
    assert time.perf_counter() - started < 5.0


def test_a_search_stops_at_its_step_budget_the_same_way_every_time():
    pattern = SafePattern("a{0,100}a{0,100}a{0,100}b")
    for _ in range(2):
        with pytest.raises(InputError, match=f"{MAX_STEPS:,} steps"):
            pattern.search("a" * 20_000)
    assert pattern.search("a" * 50 + "b")


def test_a_class_of_many_ranges_counts_each_check_against_the_budget():
    ranges = "".join(f"{chr(0x100 + 2 * i)}-{chr(0x101 + 2 * i)}" for i in range(60))
    narrow, wide = SafePattern("[b-c]{50}x"), SafePattern(f"[{ranges}b-c]{{50}}x", ignore_case=True)
    text = "b" * 5_000
    assert narrow.search(text) is False  # the same automaton, one range: well under the budget
    started = time.perf_counter()
    with pytest.raises(InputError, match=f"{MAX_STEPS:,} steps"):
        wide.search(text)
    assert time.perf_counter() - started < 5.0
    assert wide.search("B" * 50 + "x") and not wide.search("B" * 49 + "x")


ATOMS = ["a", "b", ".", r"\d", r"\w", r"\s", "[ab]", "[^a]", "(a|b)", "(?:ab)*", "^", "$", r"\b", "x?", "a+", "a{1,3}"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(ATOMS), min_size=1, max_size=5), st.text(alphabet="ab A1.\nx", max_size=12),
       st.booleans())
def test_any_pattern_of_the_subset_agrees_with_re(atoms, text, ignore_case):
    pattern = "".join(atoms)
    try:
        compiled = SafePattern(pattern, ignore_case=ignore_case)
    except InputError:
        return  # outside the subset (say, a repeated anchor): refused, not answered
    expected = re.search(pattern.replace("$", r"\Z"), text, re.I if ignore_case else 0) is not None
    assert compiled.search(text) == expected
