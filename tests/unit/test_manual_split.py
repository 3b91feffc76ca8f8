"""Splitting a manual too long for one block: one part per heading, long parts cut at blank lines."""

from __future__ import annotations

import pytest

from skillgraft.skills.manual_split import ManualPart, split_by_headings, split_manual, with_split_hint
from skillgraft.errors import ContextOverflowError, InputError

MANUAL = """Intro: what this guide covers.

# Rebasing
Run git rebase -i.

```sh
# a shell comment, not a heading
git rebase -i HEAD~3
```

## Squashing ##
Mark commits as squash.

   ### Pushing
Push with --force-with-lease.
"""


def words(text: str) -> int:
    return len(text.split())


def test_each_heading_starts_a_part_and_code_fences_are_not_headings():
    parts = split_by_headings(MANUAL)
    assert [part.title for part in parts] == ["", "Rebasing", "Squashing", "Pushing"]
    assert "# a shell comment" in parts[1].text and parts[1].text.startswith("# Rebasing")
    lines = [line.strip() for part in parts for line in part.text.splitlines() if line.strip()]
    assert lines == [line.strip() for line in MANUAL.splitlines() if line.strip()]  # every line, once, in order


def test_a_text_without_headings_is_one_part():
    assert split_by_headings("just text\n\nmore") == [ManualPart("", "just text\n\nmore")]


def test_a_part_too_long_is_cut_at_blank_lines_into_runs_that_fit():
    text = "# Long\n" + "\n\n".join(f"paragraph {i} has five words" for i in range(6))
    parts = split_manual(text, words, 12)
    assert all(part.title == "Long" and words(part.text) <= 12 for part in parts)
    assert len(parts) == 3 and "paragraph 5" in parts[-1].text


def test_a_paragraph_that_cannot_fit_is_named_and_the_error_says_what_to_do():
    with pytest.raises(ContextOverflowError, match="section 'Big'.*break it with blank lines or headings"):
        split_manual("# Big\n" + "word " * 50, words, 10)
    with pytest.raises(InputError, match="no text"):
        split_manual(" \n ", words, 10)


def test_the_split_hint_keeps_the_sizes():
    error = with_split_hint(ContextOverflowError(5000, 3840, "manual 'big'"), "use --split")
    assert (error.n_tokens, error.n_ctx) == (5000, 3840)
    assert str(error) == "manual 'big' is 5000 tokens but the context holds 3840: split it into parts that fit: use --split"
