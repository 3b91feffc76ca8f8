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
    """The positions of ``pattern`` spelled out: each character, class or ``.`` one, a group
    the sum of its parts, a bounded repetition ``{m,n}`` its part times ``max(m, n)``
    (``*``, ``+`` and ``?`` loop or skip, they spell nothing out). Scanned as llama.cpp's
    converter reads a pattern; what it cannot read is left to it to refuse.
    :class:`FormatError` naming ``field`` when over :data:`MAX_PATTERN_POSITIONS`."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise FormatError(field, f"a pattern of the JSON schema is {len(pattern):,} characters; at most {MAX_PATTERN_CHARS:,}")
    body = pattern[1:-1] if pattern.startswith("^") and pattern.endswith("$") else pattern
    groups: list[list[int]] = [[]]  # the parts of each open group so far, innermost last
    i, n = 0, len(body)
    while i < n:
        c = body[i]
        if c == "(":
            groups.append([])
            i += 1
        elif c == ")":
            inner = groups.pop() if len(groups) > 1 else []
            groups[-1].append(sum(inner))
            i += 1
        elif c == "[":
            i += 1
            while i < n and body[i] != "]":
                i += 2 if body[i] == "\\" else 1
            groups[-1].append(1)
            i += 1
        elif c == "{":
            end = body.find("}", i)
            if end < 0:
                break  # unbalanced: the converter refuses it
            times = _repetitions(body[i + 1:end], pattern, field)
            parts = groups[-1]
            if parts:
                parts[-1] *= times
            i = end + 1
        elif c in "|*+?":
            i += 1
        else:
            groups[-1].append(1)
            i += 2 if c == "\\" else 1
        total = sum(sum(parts) for parts in groups)
        if total > MAX_PATTERN_POSITIONS:
            raise FormatError(field, f"the pattern {_short(pattern)} spells out more than {MAX_PATTERN_POSITIONS:,} "
                                     "positions (nested repetitions multiply); llama.cpp would match it slowly")
    return sum(sum(parts) for parts in groups)


def _repetitions(inside: str, pattern: str, field: str) -> int:
    """How many times ``{inside}`` spells its part out: its upper bound, else its lower one plus one."""
    numbers = [part.strip() for part in inside.split(",")]
    if len(numbers) > 2 or not all(part.isdigit() and part.isascii() for part in numbers if part) or not numbers[0] and len(numbers) == 1:
        return 1  # not a quantifier the converter reads: it refuses it
    if any(len(part) > 6 for part in numbers):
        raise FormatError(field, f"a repetition of the pattern {_short(pattern)} is above {MAX_REPETITION:,}")
    low = int(numbers[0]) if numbers[0] else 0
    high = low if len(numbers) == 1 else int(numbers[1]) if numbers[1] else None
    for bound in (low, high):
        if bound is not None and bound > MAX_REPETITION:
            raise FormatError(field, f"the repetition {{{inside}}} of the pattern {_short(pattern)} is above "
                                     f"{MAX_REPETITION:,}, the most llama.cpp's grammars repeat")
    return max(high if high is not None else low + 1, 1)


def _short(pattern: str) -> str:
    return repr(pattern if len(pattern) <= 60 else pattern[:57] + "...")
