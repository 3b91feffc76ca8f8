"""The key under which a verified question recurs.

A recurring question is answered from its verified answer without the model, so two
questions may share a key only when nothing that can change the answer differs. The key
therefore keeps every digit, symbol and operator of the question (no NFKC folding: ``2³`` is
not ``23``, ``≥`` is not ``≤``, ``5!`` is not ``5``, ``1,000`` is not ``1000``) and folds only
what cannot change the answer:

- invisible format characters (zero-width spaces, direction marks) and control characters;
- letter case, except inside quotes (``'A'`` and ``'a'`` stay distinct: quote a literal
  whose case matters);
- sentence punctuation (``. , ; : !``) right after a word of two or more letters and before a
  space or the end (``eggs! How`` = ``eggs. How`` = ``eggs how``), never after a digit or a
  single letter (``5!``, ``n!`` stay);
- runs of whitespace, and whitespace next to a symbol (``17 * 23`` = ``17*23``); between two
  letters or digits one space stays (``1 2`` is not ``12``);
- trailing question marks.

Everything else is kept, so a near miss (``37 * 44`` for a stored ``37 * 43``) never gets
the stored key: precision over recall.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

_QUOTED = re.compile(r"('[^']*'|\"[^\"]*\"|`[^`]*`|‘[^’]*’|“[^”]*”)")
_SENTENCE_MARK = re.compile(r"(?<=[^\W\d_]{2})[.,;:!](?=\s|$)")


def _visible(text: str) -> str:
    kept = []
    for char in unicodedata.normalize("NFC", text):
        category = unicodedata.category(char)
        if char.isspace():
            kept.append(" ")
        elif category not in ("Cf", "Cc"):
            kept.append(char)
    return "".join(kept)


def _fold(segment: str) -> str:
    """Case and sentence punctuation folded in text outside quotes."""
    return _SENTENCE_MARK.sub("", segment.casefold())


def normalize_question(text: str) -> str:
    """The recurrence key of a question (see the module docstring)."""
    parts = _QUOTED.split(_visible(text))
    text = "".join(part if i % 2 else _fold(part) for i, part in enumerate(parts))
    text = text.strip().rstrip("?？ ").strip()
    out: list[str] = []
    for token in text.split():
        if out and out[-1][-1].isalnum() and token[0].isalnum():
            out.append(" ")
        out.append(token)
    return "".join(out)


def question_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def is_its_question(block, query: str) -> bool:
    """Whether ``query`` is the very question verified solution ``block`` answers (its key):
    the near-miss rule's one test, that only then may its stored answer be given."""
    return bool(query) and block.question_key is not None and block.question_key == normalize_question(query)
