"""Splitting a manual too long for one block into parts that each fit: one per heading.

A part starts at each Markdown heading (``#`` to ``######`` at the start of a line, outside
fenced code); text before the first heading is a part of its own. A part still too long is
cut at blank lines into runs of paragraphs that fit; a single paragraph that does not fit is
a :class:`~skillgraft.errors.ContextOverflowError` naming it. Token counts come from the
caller (the engine's own count of a block of that text), so "fits" means what capture means.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from ..errors import ContextOverflowError, InputError

_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t#]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_BLANK_LINES = re.compile(r"\n[ \t]*\n")


@dataclass(frozen=True)
class ManualPart:
    """One part of a split manual: its heading (empty before the first one) and its text."""

    title: str
    text: str


def split_by_headings(text: str) -> list[ManualPart]:
    """The manual's parts, one per heading, in order; parts holding only blanks are dropped."""
    parts: list[ManualPart] = []
    title, lines, fenced = "", [], False
    for line in text.splitlines(keepends=True):
        if _FENCE.match(line):
            fenced = not fenced
        heading = None if fenced else _HEADING.match(line.rstrip("\r\n"))
        if heading is not None and lines:
            parts.append(ManualPart(title, "".join(lines)))
            lines = []
        if heading is not None:
            title = heading.group(2).strip()
        lines.append(line)
    parts.append(ManualPart(title, "".join(lines)))
    return [ManualPart(part.title, part.text.strip()) for part in parts if part.text.strip()]


def split_manual(text: str, count: Callable[[str], int], room: int) -> list[ManualPart]:
    """Parts of ``text`` that each fit: ``count(part_text) <= room`` tokens."""
    if not text.strip():
        raise InputError("the manual has no text")
    fitted: list[ManualPart] = []
    for part in split_by_headings(text):
        if count(part.text) <= room:
            fitted.append(part)
        else:
            fitted.extend(ManualPart(part.title, piece) for piece in _paragraph_runs(part, count, room))
    return fitted


def _paragraph_runs(part: ManualPart, count: Callable[[str], int], room: int) -> list[str]:
    """The part cut at blank lines into the longest runs of paragraphs that fit."""
    runs: list[str] = []
    current = ""
    for paragraph in (p.strip() for p in _BLANK_LINES.split(part.text)):
        if not paragraph:
            continue
        joined = f"{current}\n\n{paragraph}" if current else paragraph
        if count(joined) <= room:
            current = joined
            continue
        if current:
            runs.append(current)
        n_tokens = count(paragraph)
        if n_tokens > room:
            where = f"section {part.title!r}" if part.title else "the text before the first heading"
            raise ContextOverflowError(
                n_tokens, room, f"a paragraph of {where} ({paragraph[:40]!r}...)",
                hint="break it with blank lines or headings",
            )
        current = paragraph
    if current:
        runs.append(current)
    return runs


def with_split_hint(error: ContextOverflowError, how: str) -> ContextOverflowError:
    """``error`` (a manual that does not fit) again, saying how to split the manual."""
    return ContextOverflowError(error.n_tokens, error.n_ctx, error.what, hint=f"split it into parts that fit: {how}")
