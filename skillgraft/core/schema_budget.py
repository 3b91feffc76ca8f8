"""What a JSON schema may cost: the checks made before it is turned into a grammar.

A schema is request input. Turned into GBNF by llama.cpp's converter, a bounded repetition is
spelled out in full (``{"pattern": "^a{3000000}$"}`` would be three million copies), and once
the grammar constrains an answer, llama.cpp's matcher keeps one parse stack per way the text
so far can be read: nested bounded repetitions of a pattern (``^((a{0,20}){0,20}){0,20}$``)
make that number the product of their bounds, paid on every token. So the schema is walked
first, without recursion and in time linear in its size, and refused (:class:`FormatError`
naming the request field) when it is larger than the budgets below; only then is it
converted, and the conversion itself runs under a time and size budget
(:mod:`skillgraft.core.json_grammar`). The figures behind each budget are in
``docs/limits.md`` (*Budgets*).
"""

from __future__ import annotations

from typing import Any

from ..errors import FormatError

MAX_DEPTH = 64
MAX_NODES = 4_000  # objects, lists and values of the schema, all told
MAX_PROPERTIES = 128  # of one object
# Optional properties cost the converter the square of their number (a rule for each one and
# each that may follow it): 950 of them took 24 s of CPU. Summed over the schema's objects.
MAX_OPTIONAL_PAIRS = 2 * MAX_PROPERTIES**2
MAX_ALTERNATIVES = 256  # of one anyOf, oneOf, enum or type list
# llama.cpp's grammar parser refuses repetitions above 2,000; the converter would first spell
# a larger bound out in full, so it is refused before.
MAX_REPETITION = 2_000
MAX_PATTERN_CHARS = 1_000
# A pattern spelled out (every bounded repetition written out, nested ones multiplied): the
# most parse stacks its grammar can hold at once, and about the size of its rules.
MAX_PATTERN_POSITIONS = 4_096
# Measured with llama.cpp's grammar sampler over SmolLM2's 49,152 tokens (one step: the whole
# vocabulary masked, then a token accepted; docs/limits.md, *Budgets*): against ~10 ms for
# ``^[a-z]+$``, ``(a{1,8}){1,8}`` took 78 ms a step, ``(a{1,32}){1,32}`` 845 ms and
# ``((a{0,12}){0,12}){0,12}`` 45 s; a part that can match nothing, repeated, is worse:
# ``(a?){0,64}`` 2 s a step, ``(a{0,2}){0,32}`` 376 ms, while ``(a{0,4}){0,4}`` took 23 ms.
MAX_NESTED_REPEATS = 64  # the product of the bounds of nested repetitions
MAX_EMPTY_REPEATS = 4  # the bound of a repetition of a part that can match nothing
# Every repetition bound and every pattern's positions of one schema, summed: a bound on the
# grammar the converter writes before it writes it.
MAX_SPELLED_OUT = 32_000
BOUNDS = ("minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties")
ALTERNATIVES = ("anyOf", "oneOf", "enum", "allOf", "prefixItems")


def check_schema(schema: Any, field: str) -> None:
    """Refuse ``schema`` (:class:`FormatError` naming ``field``) when converting or matching
    it would cost more than the budgets allow."""
    pending = [(schema, 1)]
    nodes = spelled = pairs = 0
    while pending:
        node, depth = pending.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise FormatError(field, f"the JSON schema has more than {MAX_NODES:,} parts")
        if depth > MAX_DEPTH:
            raise FormatError(field, f"the JSON schema is nested deeper than {MAX_DEPTH} levels")
        if isinstance(node, dict):
            spelled += _check_node(node, field)
            if spelled > MAX_SPELLED_OUT:
                raise FormatError(field, f"the JSON schema spells out more than {MAX_SPELLED_OUT:,} repetitions in all")
            pairs += _optional(node) ** 2
            if pairs > MAX_OPTIONAL_PAIRS:
                raise FormatError(field, f"the JSON schema has too many optional properties (the squares of each object's "
                                         f"number of them sum to more than {MAX_OPTIONAL_PAIRS:,})")
            pending.extend((value, depth + 1) for value in node.values())
        elif isinstance(node, list):
            pending.extend((value, depth + 1) for value in node)


def _optional(node: dict) -> int:
    """How many optional properties the object ``node`` has."""
    properties = node.get("properties")
    if not isinstance(properties, dict):
        return 0
    required = node.get("required")
    required = set(required) if isinstance(required, list) and all(isinstance(r, str) for r in required) else set()
    return sum(1 for name in properties if name not in required)


def _check_node(node: dict, field: str) -> int:
    """Check one schema object's own budgets; return what it spells out."""
    spelled = 0
    for key in BOUNDS:
        bound = node.get(key)
        if isinstance(bound, (int, float)) and not isinstance(bound, bool):
            if bound > MAX_REPETITION:
                raise FormatError(field, f"{key} {bound} is above {MAX_REPETITION:,}, the most llama.cpp's grammars repeat")
            spelled += max(int(bound), 0)
    properties = node.get("properties")
    if isinstance(properties, dict) and len(properties) > MAX_PROPERTIES:
        raise FormatError(field, f"an object of the JSON schema has {len(properties):,} properties; at most {MAX_PROPERTIES}")
    for key in (*ALTERNATIVES, "type"):
        options = node.get(key)
        if isinstance(options, list) and len(options) > MAX_ALTERNATIVES:
            raise FormatError(field, f"a {key} of the JSON schema has {len(options):,} entries; at most {MAX_ALTERNATIVES}")
    pattern = node.get("pattern")
    if isinstance(pattern, str):
        spelled += pattern_positions(pattern, field)
    return spelled


def pattern_positions(pattern: str, field: str) -> int:
    """The positions of ``pattern`` spelled out, as llama.cpp's converter reads it: a
    character, class or ``.`` one, a group the sum of its parts, ``{m,n}`` its part times
    ``max(m, n)`` (``*``, ``+`` and ``?`` loop or skip and spell nothing out). What it cannot
    read is left to the converter to refuse. :class:`FormatError` naming ``field`` when over
    :data:`MAX_PATTERN_POSITIONS`, or when its repetitions would make llama.cpp's matcher
    slow (:data:`MAX_NESTED_REPEATS`, :data:`MAX_EMPTY_REPEATS`)."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise FormatError(field, f"a pattern of the JSON schema is {len(pattern):,} characters; at most {MAX_PATTERN_CHARS:,}")
    body = pattern[1:-1] if pattern.startswith("^") and pattern.endswith("$") else pattern
    # Each open group: its alternatives, each a list of parts (positions, can match nothing, nested repeats).
    groups: list[list[list[_Part]]] = [[[]]]
    i, n = 0, len(body)
    while i < n:
        c = body[i]
        parts = groups[-1][-1]
        if c == "(":
            groups.append([[]])
            i += 1
        elif c == ")":
            if len(groups) > 1:
                groups[-2][-1].append(_group(groups.pop()))
            i += 1
        elif c == "|":
            groups[-1].append([])
            i += 1
        elif c == "[":
            i += 1
            while i < n and body[i] != "]":
                i += 2 if body[i] == "\\" else 1
            parts.append((1, False, 1))
            i += 1
        elif c == "{":
            end = body.find("}", i)
            if end < 0:
                break  # unbalanced: the converter refuses it
            low, high = _repetitions(body[i + 1:end], pattern, field)
            if parts:
                parts[-1] = _repeated(parts[-1], low, high, pattern, field)
            i = end + 1
        elif c in "*?":
            if parts:
                parts[-1] = (parts[-1][0], True, parts[-1][2])
            i += 1
        elif c == "+":
            i += 1
        else:
            parts.append((1, False, 1))
            i += 2 if c == "\\" else 1
        total = sum(part[0] for alternatives in groups for parts_ in alternatives for part in parts_)
        if total > MAX_PATTERN_POSITIONS:
            raise FormatError(field, f"the pattern {_short(pattern)} spells out more than {MAX_PATTERN_POSITIONS:,} "
                                     "positions (nested repetitions multiply)")
    while len(groups) > 1:  # unbalanced: counted as if closed, the converter refuses it
        groups[-2][-1].append(_group(groups.pop()))
    return _group(groups[0])[0]


_Part = tuple  # (positions, can match nothing, product of the nested repetitions' bounds)


def _group(alternatives: list[list[_Part]]) -> _Part:
    positions = sum(part[0] for parts in alternatives for part in parts)
    empty = any(all(part[1] for part in parts) for parts in alternatives)
    nested = max((part[2] for parts in alternatives for part in parts), default=1)
    return positions, empty, nested


def _repeated(part: _Part, low: int, high: int, pattern: str, field: str) -> _Part:
    """``part`` under ``{low,high}``; refused when llama.cpp would match it slowly."""
    positions, empty, nested = part
    if empty and high > MAX_EMPTY_REPEATS:
        raise FormatError(field, f"the pattern {_short(pattern)} repeats up to {high} times a part that can match nothing "
                                 f"(at most {MAX_EMPTY_REPEATS}); llama.cpp would match it slowly")
    if nested > 1 and high > 1 and nested * high > MAX_NESTED_REPEATS:
        raise FormatError(field, f"the pattern {_short(pattern)} nests repetitions whose bounds multiply to "
                                 f"{nested * high:,} (at most {MAX_NESTED_REPEATS}); llama.cpp would match it slowly")
    return positions * max(high, 1), empty or low == 0, nested * high if high > 1 else nested


def _repetitions(inside: str, pattern: str, field: str) -> tuple[int, int]:
    """The bounds of ``{inside}``: its lower one, and its upper one (unbounded: the lower plus
    one, what the converter spells out before its loop)."""
    numbers = [part.strip() for part in inside.split(",")]
    if len(numbers) > 2 or not all(part.isdigit() and part.isascii() for part in numbers if part) or not numbers[0] and len(numbers) == 1:
        return 1, 1  # not a quantifier the converter reads: it refuses it
    if any(len(part) > 6 for part in numbers):
        raise FormatError(field, f"a repetition of the pattern {_short(pattern)} is above {MAX_REPETITION:,}")
    low = int(numbers[0]) if numbers[0] else 0
    high = low if len(numbers) == 1 else int(numbers[1]) if numbers[1] else None
    for bound in (low, high):
        if bound is not None and bound > MAX_REPETITION:
            raise FormatError(field, f"the repetition {{{inside}}} of the pattern {_short(pattern)} is above "
                                     f"{MAX_REPETITION:,}, the most llama.cpp's grammars repeat")
    return low, high if high is not None else low + 1


def _short(pattern: str) -> str:
    return repr(pattern if len(pattern) <= 60 else pattern[:57] + "...")
