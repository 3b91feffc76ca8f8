"""Checks every door applies to text it is given: str, valid UTF-8, no NUL byte, not empty."""

from __future__ import annotations

from ..errors import InputError

MAX_QUERY_CHARS = 4_000


def require_text(text, what: str) -> str:
    """``text`` when it is a str that encodes as UTF-8 and holds no NUL byte, else :class:`InputError`."""
    if not isinstance(text, str):
        raise InputError(f"{what} must be text, got {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"{what} is not valid UTF-8 (character {exc.start})") from None
    if "\x00" in text:
        raise InputError(f"{what} contains a NUL byte (at character {text.index(chr(0))})")
    return text


def clean_query(query) -> str:
    """A usable query string, or :class:`InputError`."""
    if isinstance(query, bytes):
        try:
            query = query.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(f"the query is not valid UTF-8 (byte {exc.start})") from None
    query = require_text(query, "the query").strip()
    if not query:
        raise InputError("the query is empty")
    return query
