"""Packing a long Markdown text into as few parts as fit one block each.

The text is cut into sections at its headings (:func:`~skillgraft.skills.manual_split.split_by_headings`,
which knows fenced code), each knowing its heading path (``Forms > Checkboxes``). Sections are
packed in order into parts while the part still fits; a section that is a heading alone is
never a part of its own (it goes with what follows it). A section too long for one part is cut
at blank lines, a paragraph too long at sentence ends and line breaks, a sentence too long at
spaces, and a run without spaces, last, where it must. ``fits(path, text)`` is the caller's
test (the engine's token count of the block that text would make, its prefix included).
:class:`~skillgraft.errors.InputError` when more than ``max_parts`` parts would be needed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from ..errors import InputError
from .manual_split import _HEADING, split_by_headings

Fits = Callable[[str, str], bool]

_PARAGRAPHS = re.compile(r"\n[ \t]*\n")
_SENTENCE_ENDS = re.compile(r"(?<=\n)|(?<=[.!?;])(?=\s)")
_SPACES = re.compile(r"(?<=\s)(?=\S)")


@dataclass(frozen=True)
class PackedPart:
    """One part: the heading path of its first section (`` > ``-joined; empty before any heading) and its text."""

    path: str
    text: str


def heading_paths(text: str) -> list[tuple[str, str]]:
    """``(heading path, section text)`` per section of ``text``, in order."""
    stack: list[tuple[int, str]] = []
    out = []
    for part in split_by_headings(text):
        match = _HEADING.match(part.text.splitlines()[0])
        if match:
            level = len(match.group(1))
            stack = [(lvl, title) for lvl, title in stack if lvl < level] + [(level, part.title)]
        out.append((" > ".join(title for _, title in stack), part.text))
    return out


def _heading_only(text: str) -> bool:
    lines = [line for line in text.splitlines() if line.strip()]
    return len(lines) == 1 and _HEADING.match(lines[0]) is not None


def pack_sections(text: str, fits: Fits, *, max_parts: int = 64) -> list[PackedPart]:
    """``text`` as the fewest parts in order that each ``fits``, cut as the module says."""
    if not text.strip():
        raise InputError("the text is empty")
    parts: list[PackedPart] = []

    def close(path: str, body: str) -> None:
        parts.append(PackedPart(path, body))
        if len(parts) > max_parts:
            raise InputError(f"the text needs more than {max_parts} parts")

    path, current = "", ""
    for section_path, section in heading_paths(text):
        if not current:
            path = section_path
        joined = f"{current}\n\n{section}" if current else section
        if fits(path, joined):
            current = joined
            continue
        if current and not _heading_only(current):
            close(path, current)
            path, joined = section_path, section
            if fits(path, joined):
                current = joined
                continue
        # too long for one part (with a heading alone carried before it): cut it
        pieces = _cut(joined, lambda piece: fits(path, piece))
        for piece in pieces[:-1]:
            close(path, piece)
        current = pieces[-1]
    if current:
        close(path, current)
    return parts


def _cut(text: str, fits: Callable[[str], bool]) -> list[str]:
    """``text`` cut into pieces that fit: at paragraphs, then sentences, then spaces, then anywhere."""
    paragraphs = [p.strip() for p in _PARAGRAPHS.split(text) if p.strip()]
    units: list[str] = []
    for paragraph in paragraphs:  # a heading alone goes with the paragraph after it
        if units and _heading_only(units[-1]):
            units[-1] = f"{units[-1]}\n\n{paragraph}"
        else:
            units.append(paragraph)
    return _greedy(units, "\n\n", fits, _cut_paragraph)


def _cut_paragraph(paragraph: str, fits: Callable[[str], bool]) -> list[str]:
    units = [u for u in _SENTENCE_ENDS.split(paragraph) if u]
    if len(units) < 2:
        return _cut_sentence(paragraph, fits)
    return _greedy(units, "", fits, _cut_sentence)


def _cut_sentence(sentence: str, fits: Callable[[str], bool]) -> list[str]:
    units = [u for u in _SPACES.split(sentence) if u]
    if len(units) < 2:
        return _cut_anywhere(sentence, fits)
    return _greedy(units, "", fits, _cut_anywhere)


def _cut_anywhere(run: str, fits: Callable[[str], bool]) -> list[str]:
    """The longest prefixes that fit, found by bisection (a run without spaces)."""
    pieces = []
    while run:
        low, high = 1, len(run)
        if fits(run):
            low = high
        while low < high:
            middle = (low + high + 1) // 2
            if fits(run[:middle]):
                low = middle
            else:
                high = middle - 1
        if not fits(run[:low]):
            raise InputError("not even one character fits a block beside its prefix")
        pieces.append(run[:low])
        run = run[low:]
    return pieces


def _greedy(units: list[str], sep: str, fits: Callable[[str], bool], finer) -> list[str]:
    """Units joined by ``sep`` into the longest runs that fit; a unit that cannot fit is cut finer."""
    pieces: list[str] = []
    current = ""
    for unit in units:
        joined = f"{current}{sep}{unit}" if current else unit
        if fits(joined.strip()):
            current = joined
            continue
        if _heading_only(current):  # never a heading alone: cut it together with what follows
            cut = finer(joined.strip(), fits)
            pieces.extend(cut[:-1])
            current = cut[-1]
            continue
        if current.strip():
            pieces.append(current.strip())
        current = ""
        if fits(unit.strip()):
            current = unit
            continue
        cut = finer(unit.strip(), fits)
        pieces.extend(cut[:-1])
        current = cut[-1]
    if current.strip():
        pieces.append(current.strip())
    return pieces
