"""The key under which a verified question recurs.

A recurring question is answered from its verified answer without the model, so two
questions may share a key only when nothing that can change the answer differs. The key
therefore keeps every symbol, digit and letter of the question (no NFKC folding: ``2³`` is
not ``23``, ``≥`` is not ``≤``, ``5!`` is not ``5``) and folds only what cannot change
the meaning:

- invisible format characters (zero-width spaces, direction marks) and control characters;
- the case of words of two or more letters (``What`` = ``what``; single letters such as
  variables ``A`` and ``a`` stay distinct);
- runs of whitespace, and whitespace next to a symbol (``17 * 23`` = ``17*23``); between
  two letters or digits one space stays (``1 2`` is not ``12``);
- trailing question marks.

Everything else is kept, so a near miss (``37 * 44`` for a stored ``37 * 43``) never gets
the stored key: precision over recall.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

_WORD = re.compile(r"[^\W\d_]{2,}")


def _visible(text: str) -> str:
    kept = []
    for char in unicodedata.normalize("NFC", text):
        category = unicodedata.category(char)
        if char.isspace():
            kept.append(" ")
        elif category not in ("Cf", "Cc"):
            kept.append(char)
    return "".join(kept)


def normalize_question(text: str) -> str:
    """The recurrence key of a question (see the module docstring)."""
    text = _visible(text)
    text = _WORD.sub(lambda m: m.group().casefold(), text)
    text = text.strip().rstrip("?？ ").strip()
    out: list[str] = []
    for token in text.split():
        if out and out[-1][-1].isalnum() and token[0].isalnum():
            out.append(" ")
        out.append(token)
    return "".join(out)


def question_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
