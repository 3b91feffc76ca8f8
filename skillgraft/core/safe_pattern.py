"""A safe subset of regular expressions, matched in time linear in the text.

Python's ``re`` backtracks: a pattern such as ``(a+)+$`` takes exponential time on a text it
almost matches, and a pattern read from a skill folder is someone else's input. This module
compiles a subset of the syntax to a small automaton and runs every alternative in lockstep
(a Thompson/Pike simulation), so a search takes at most ``len(text) x program size`` steps,
whatever the pattern. It only says *whether* the pattern occurs; there are no groups to read.

The subset (anything else is refused with :class:`~skillgraft.errors.InputError`):

- literal characters; ``\\`` before a punctuation character makes it literal; ``\\n``,
  ``\\t``, ``\\r``;
- ``.`` (any character but a newline), ``\\d \\D \\w \\W \\s \\S``, classes ``[abc]``,
  ``[a-z0-9_]``, ``[^...]`` (with those escapes inside);
- ``^`` and ``$`` (the start and end of the whole text: no multi-line mode), ``\\b`` and ``\\B``;
- groups ``(...)`` and ``(?:...)``, alternation ``|``;
- ``*``, ``+``, ``?``, ``{m}``, ``{m,}``, ``{m,n}`` (m, n at most :data:`MAX_REPEAT`), with or
  without a lazy ``?`` after them (the same answer: only whether there is a match).

Refused: backreferences, lookarounds, named groups, inline flags, other escapes; a pattern
over :data:`MAX_PATTERN_CHARS` characters or one that compiles to more than
:data:`MAX_PROGRAM` instructions. A search that would visit more than :data:`MAX_STEPS`
automaton states (a large program on a long text) stops with an :class:`InputError`: the
bound is a count, not a clock, so the same pattern and text always get the same answer. A
character test counts as many steps as the checks it makes (a class of ``n`` ranges or escapes,
``1 + n``; three times that when case is ignored), so a class of many ranges cannot make a
search under the cap cost more time than the cap means.
Case is ignored with ``ignore_case=True``.
"""

from __future__ import annotations

from typing import Callable

from ..errors import InputError

MAX_PATTERN_CHARS = 200
MAX_PROGRAM = 1_000
MAX_REPEAT = 100
MAX_STEPS = 2_000_000  # automaton states visited by one search, at most

_CHAR, _SPLIT, _JMP, _ASSERT, _MATCH = range(5)
Predicate = Callable[[str], bool]


def _word(c: str) -> bool:
    return c.isalnum() or c == "_"


_CLASSES: dict[str, Predicate] = {
    "d": str.isdecimal, "D": lambda c: not c.isdecimal(), "w": _word, "W": lambda c: not _word(c),
    "s": str.isspace, "S": lambda c: not c.isspace(),
}
_LITERAL_ESCAPES = {"n": "\n", "t": "\t", "r": "\r"}
_SPECIAL = set("()[]{}|*+?.^$\\")


class SafePattern:
    """A compiled pattern of the subset; ``search(text)`` says whether it occurs in ``text``."""

    def __init__(self, pattern: str, *, ignore_case: bool = False) -> None:
        if not isinstance(pattern, str):
            raise InputError(f"a pattern must be a string, got {type(pattern).__name__}")
        if len(pattern) > MAX_PATTERN_CHARS:
            raise InputError(f"the pattern has {len(pattern)} characters, over the {MAX_PATTERN_CHARS} allowed")
        self.pattern = pattern
        self.ignore_case = ignore_case
        parser = _Parser(pattern, ignore_case)
        fragment = parser.alternation()
        if parser.pos < len(pattern):
            raise InputError(f"unbalanced ')' at position {parser.pos} of the pattern")
        self.program = _fits(fragment + [(_MATCH,)])

    def search(self, text: str) -> bool:
        """Whether the pattern matches somewhere in ``text`` (at most len(text) x program steps)."""
        program, n = self.program, len(text)
        current: list[int] = []
        _add(program, text, current, set(), 0, 0)
        steps = 0
        for i in range(n + 1):
            if any(program[pc][0] == _MATCH for pc in current):
                return True
            if i == n:
                return False
            c = text[i]
            following: list[int] = []
            seen: set[int] = set()
            for pc in current:
                op = program[pc]
                if op[0] == _CHAR:
                    steps += op[2] - 1  # (its state is counted below)
                    if op[1](c):
                        _add(program, text, following, seen, pc + 1, i + 1)
            _add(program, text, following, seen, 0, i + 1)  # a match may start at any position
            current = following
            steps += len(seen)
            if steps > MAX_STEPS:
                raise InputError(f"the pattern needs over {MAX_STEPS:,} steps on this text: shorten it or the text")
        return False


def _add(program: list, text: str, into: list[int], seen: set[int], pc: int, i: int) -> None:
    """The instructions reachable from ``pc`` at position ``i`` without reading a character."""
    stack = [pc]
    while stack:
        pc = stack.pop()
        if pc in seen:
            continue
        seen.add(pc)
        op = program[pc]
        if op[0] == _JMP:
            stack.append(pc + op[1])
        elif op[0] == _SPLIT:
            stack.extend((pc + op[2], pc + op[1]))
        elif op[0] == _ASSERT:
            if _holds(op[1], text, i):
                stack.append(pc + 1)
        else:
            into.append(pc)


def _holds(kind: str, text: str, i: int) -> bool:
    if kind == "^":
        return i == 0
    if kind == "$":
        return i == len(text)
    boundary = (i > 0 and _word(text[i - 1])) != (i < len(text) and _word(text[i]))
    return boundary if kind == "b" else bool(text) and not boundary  # as in re: \B never matches ""


def _fits(program: list) -> list:
    if len(program) > MAX_PROGRAM:
        raise InputError(f"the pattern compiles to over {MAX_PROGRAM} instructions: repeat less")
    return program


class _Parser:
    """Recursive descent over the subset, building fragments with relative jumps (copyable)."""

    def __init__(self, pattern: str, ignore_case: bool) -> None:
        self.text, self.pos, self.ignore_case = pattern, 0, ignore_case

    def peek(self, ahead: int = 0) -> str:
        at = self.pos + ahead
        return self.text[at] if at < len(self.text) else ""

    def alternation(self) -> list:
        branches = [self.sequence()]
        while self.peek() == "|":
            self.pos += 1
            branches.append(self.sequence())
        out = branches[-1]
        for branch in reversed(branches[:-1]):
            out = _fits([(_SPLIT, 1, len(branch) + 2), *branch, (_JMP, len(out) + 1), *out])
        return out

    def sequence(self) -> list:
        out: list = []
        while self.peek() and self.peek() not in "|)":
            atom, repeatable = self.atom()
            out = _fits(out + self.quantified(atom, repeatable))
        return out

    def atom(self) -> tuple[list, bool]:
        c = self.peek()
        self.pos += 1
        if c == "(":
            if self.peek() == "?":
                if self.peek(1) != ":":
                    raise InputError("only (...) and (?:...) groups are supported (no lookarounds, names or flags)")
                self.pos += 2
            inner = self.alternation()
            if self.peek() != ")":
                raise InputError("a group of the pattern is not closed")
            self.pos += 1
            return inner, True
        if c == "[":
            return [(_CHAR, *self.char_class())], True
        if c == ".":
            return [(_CHAR, lambda ch: ch != "\n", 1)], True
        if c in "^$":
            return [(_ASSERT, c)], False
        if c in "*+?":
            raise InputError(f"nothing to repeat before {c!r} at position {self.pos - 1}")
        if c == "\\":
            escape = self.escape()
            if escape in ("b", "B"):
                return [(_ASSERT, escape)], False
            return [(_CHAR, escape, 1)], True
        return [(_CHAR, self.literal(c), 1)], True

    def escape(self):
        """The predicate of an escape (or ``"b"``/``"B"`` for a boundary)."""
        c = self.peek()
        self.pos += 1
        if not c:
            raise InputError("the pattern ends with a lone backslash")
        if c in _CLASSES:
            return _CLASSES[c]
        if c in ("b", "B"):
            return c
        if c in _LITERAL_ESCAPES:
            return self.literal(_LITERAL_ESCAPES[c])
        if c.isalnum():
            raise InputError(f"the escape \\{c} is not supported (no backreferences or other escapes)")
        return self.literal(c)

    def literal(self, c: str) -> Predicate:
        if self.ignore_case:
            folded = c.lower()
            return lambda ch: ch.lower() == folded
        return lambda ch: ch == c

    def char_class(self) -> tuple[Predicate, int]:
        """The class's predicate and the checks one test of it may make (its weight in steps)."""
        negated = self.peek() == "^"
        self.pos += negated
        singles: set[str] = set()
        ranges: list[tuple[str, str]] = []
        escapes: list[Predicate] = []
        first = True
        while True:
            c = self.peek()
            if not c:
                raise InputError("a [...] class of the pattern is not closed")
            self.pos += 1
            if c == "]" and not first:
                break
            first = False
            if c == "\\":
                e = self.peek()
                self.pos += 1
                if e in _CLASSES:
                    escapes.append(_CLASSES[e])
                    continue
                if e in _LITERAL_ESCAPES:
                    c = _LITERAL_ESCAPES[e]
                elif not e or e.isalnum():
                    raise InputError(f"the escape \\{e} is not supported in a class")
                else:
                    c = e
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                end = self.peek(1)
                if end == "\\":
                    raise InputError("a class range cannot end with an escape")
                self.pos += 2
                if end < c:
                    raise InputError(f"bad class range {c}-{end}")
                ranges.append((c, end))
            else:
                singles.add(c)
        fold = self.ignore_case

        def inside(ch: str) -> bool:
            return ch in singles or any(a <= ch <= b for a, b in ranges) or any(p(ch) for p in escapes)

        def member(ch: str) -> bool:
            found = inside(ch) or (fold and (inside(ch.lower()) or inside(ch.upper())))
            return found != negated

        return member, (1 + len(ranges) + len(escapes)) * (3 if fold else 1)

    def quantified(self, atom: list, repeatable: bool) -> list:
        bounds = self.quantifier()
        if bounds is None:
            return atom
        if not repeatable:
            raise InputError("an anchor or boundary cannot be repeated")
        if self.peek() == "?":
            self.pos += 1  # lazy: the same yes or no
        if self.peek() in ("*", "+", "?") or (self.peek() == "{" and self._bounds_ahead()):
            raise InputError(f"multiple repeat at position {self.pos} of the pattern")
        low, high = bounds
        out = atom * low
        if high is None:
            return _fits(out + [(_SPLIT, 1, len(atom) + 2), *atom, (_JMP, -(len(atom) + 1))])
        tail: list = []
        for _ in range(high - low):
            tail = _fits([(_SPLIT, 1, len(atom) + len(tail) + 1), *atom, *tail])
        return _fits(out + tail)

    def quantifier(self):
        c = self.peek()
        if c in ("*", "+", "?"):
            self.pos += 1
            return {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
        if c == "{":
            bounds = self._bounds_ahead()
            if bounds is not None:
                self.pos = bounds[2]
                return bounds[:2]
        return None

    def _bounds_ahead(self):
        """``(low, high, end position)`` of a ``{m,n}`` at the position, or None (then ``{`` is literal)."""
        close = self.text.find("}", self.pos)
        if close < 0:
            return None
        body = self.text[self.pos + 1:close]
        low, comma, high = body.partition(",")
        if not (low.isdigit() or (comma and not low)) or (high and not high.isdigit()) or not (low or comma):
            return None  # ``{}`` is literal; ``{,}`` is ``{0,}``, as in re
        if not all(part.isascii() for part in (low, high)):
            return None
        lo = int(low) if low else 0
        hi = (int(high) if high else None) if comma else lo
        if lo > MAX_REPEAT or (hi is not None and hi > MAX_REPEAT):
            raise InputError(f"a repeat count over {MAX_REPEAT} in the pattern")
        if hi is not None and hi < lo:
            raise InputError(f"bad repeat {{{body}}} in the pattern")
        return lo, hi, close + 1
