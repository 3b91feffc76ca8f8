"""The budgets of a JSON schema (:mod:`skillgraft.core.schema_budget`): what would cost the
converter memory or CPU, or llama.cpp's matcher time on every token, is refused before it is
converted, naming the request field; the conversion itself runs under a time and size budget.

The figures in the assertions were measured on the code before these budgets: the 47-byte
``^[a]{3000000}$`` schema made the converter allocate 60 MiB (tracemalloc peak) before the
grammar's size was checked, 950 optional properties took 24 s of CPU on this machine."""

from __future__ import annotations

import time
import tracemalloc

import pytest

from skillgraft.core import json_grammar
from skillgraft.core.schema_budget import MAX_PATTERN_POSITIONS, check_schema, pattern_positions
from skillgraft.core.tools import Tool, output_format
from skillgraft.errors import FormatError

OPTIONAL_950 = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(950)}}


def _costs(call) -> tuple[float, int, BaseException]:
    """CPU seconds and peak traced bytes of ``call``, and what it raised."""
    tracemalloc.start()
    started = time.thread_time()
    try:
        call()
    except BaseException as exc:  # noqa: BLE001 (returned to the test)
        raised = exc
    else:
        raised = AssertionError("nothing was refused")
    cpu = time.thread_time() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return cpu, peak, raised


@pytest.mark.parametrize("door, field", [
    (lambda s: output_format(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": s}}), "response_format"),
    (lambda s: output_format([Tool("f", parameters={"type": "object", "properties": {"x": s}, "required": ["x"]})]), "tools"),
])
def test_a_huge_quantifier_is_refused_before_a_byte_is_spelled_out(door, field):
    cpu, peak, raised = _costs(lambda: door({"type": "string", "pattern": "^[a]{3000000}$"}))
    assert isinstance(raised, FormatError) and raised.field == field and "3000000" in str(raised)
    assert peak < 1 * 2**20 and cpu < 0.05  # before: a 60 MiB peak


def test_patterns_are_counted_as_the_converter_spells_them_out():
    assert pattern_positions("^[a-z]+@[a-z]{2,8}\\.(com|org)$", "f") == 1 + 1 + 8 + 1 + 6
    assert pattern_positions("^([a-f]{2}:){5}[a-f]{2}$", "f") == 3 * 5 + 2
    assert pattern_positions("^(a|aa){0,200}$", "f") == 600
    with pytest.raises(FormatError, match=f"{MAX_PATTERN_POSITIONS:,} positions"):
        pattern_positions("^(abcdefgh){0,600}$", "f")


# Each was measured (llama.cpp's grammar sampler over SmolLM2's vocabulary, a whole-vocabulary
# mask and an accept per step; ``^[a-z]+$`` ~10 ms a step): what is refused took from 0.3 s to
# 45 s a step, what passes at most ~80 ms.
@pytest.mark.parametrize("pattern, refused", [
    ("^((a{0,12}){0,12}){0,12}$", "can match nothing"),  # 45 s a step
    ("^((a{1,8}){1,8}){1,8}$", "multiply to 512"),  # 0.3 s
    ("^(a{0,32}){0,32}$", "can match nothing"),  # 2.1 s
    ("^(a{1,32}){1,32}$", "multiply to 1,024"),  # 0.85 s
    ("^(a?){0,64}$", "can match nothing"),  # 2.0 s
    ("^(a{0,2}){0,32}$", "can match nothing"),  # 0.38 s
    ("^(a{0,4}){0,4}$", None),  # 23 ms
    ("^(a{1,8}){1,8}$", None),  # 78 ms
    ("^(a|aa){0,200}$", None),  # 22 ms
    ("^(a{0,32}){0,2}$", None),  # 12 ms
    ("^(a*)*$", None),  # 30 ms: an unbounded loop is one stack
])
def test_repetitions_that_would_make_matching_slow_are_refused(pattern, refused):
    schema = {"type": "string", "pattern": pattern}
    if refused is None:
        check_schema(schema, "response_format")
        return
    with pytest.raises(FormatError, match=refused) as raised:
        check_schema(schema, "response_format")
    assert raised.value.field == "response_format"


@pytest.mark.parametrize("pattern", ["^a{99999999999999999999999}$", "^a{1,3000}$", "^a{3000,}$", "x" * 1_001])
def test_a_pattern_too_long_or_repeated_too_often_is_refused(pattern):
    with pytest.raises(FormatError):
        check_schema({"type": "string", "pattern": pattern}, "response_format")


def test_many_optional_properties_are_refused_without_the_converters_square_cost():
    cpu, _, raised = _costs(lambda: json_grammar.schema_grammar(OPTIONAL_950, "response_format"))
    assert isinstance(raised, FormatError) and "950 properties" in str(raised)
    assert cpu < 0.05  # before: 24 s of CPU, then a grammar
    eight = {"anyOf": [{"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(128)}}] * 8}
    with pytest.raises(FormatError, match="optional properties"):
        check_schema(eight, "response_format")


@pytest.mark.parametrize("schema", [
    {"enum": list(range(257))},
    {"anyOf": [{"type": "integer"}] * 257},
    {"type": "array", "items": [{"type": "integer"}] * 4_001},
    {"type": "object", "properties": {f"p{i}": {"type": "string", "maxLength": 2_000} for i in range(17)}, "required": []},
])
def test_alternatives_parts_and_repetitions_in_all_are_bounded(schema):
    with pytest.raises(FormatError):
        check_schema(schema, "response_format")


def test_ordinary_schemas_pass_the_budgets():
    person = {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 100}, "email": {"type": "string", "pattern": "^[a-z.]+@[a-z]+\\.[a-z]{2,6}$"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 20},
        "kind": {"enum": ["a", "b", "c"]}, "age": {"type": "integer"}}, "required": ["name"]}
    grammar = json_grammar.schema_grammar(person, "response_format")
    assert "root ::=" in grammar


def test_the_conversion_runs_under_a_time_and_a_size_budget(monkeypatch):
    schema = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(64)}}
    json_grammar.schema_grammar(schema, "response_format")
    monkeypatch.setattr(json_grammar, "CONVERT_BUDGET_S", 0.0)
    with pytest.raises(FormatError, match="took more than") as raised:
        json_grammar.schema_grammar(schema, "tools")
    assert raised.value.field == "tools"
    monkeypatch.setattr(json_grammar, "CONVERT_BUDGET_S", 5.0)
    monkeypatch.setattr(json_grammar, "MAX_GRAMMAR_CHARS", 1_000)
    with pytest.raises(FormatError, match="more than 1,000 characters"):
        json_grammar.schema_grammar(schema, "response_format")


def test_the_collectors_time_inside_the_conversion_is_not_the_conversions(monkeypatch):
    # A full collection of a large process (a gateway, a long test run) can take a second of
    # CPU in whichever thread triggers it; a 2 ms conversion was refused once one ran inside it.
    import gc

    schema = {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(8)}}
    slow_collection = 2 * json_grammar.CONVERT_BUDGET_S

    def burn(phase, info):
        if phase == "start":
            until = time.thread_time() + slow_collection
            while time.thread_time() < until:
                pass

    original = json_grammar._budgeted
    collected = []

    def collecting(module):
        converter = original(module)

        class Collecting(converter):
            def _add_rule(self, name, rule):
                if not collected:
                    collected.append(gc.collect())  # a collection between the deadline and its check
                return super()._add_rule(name, rule)

        return Collecting

    monkeypatch.setattr(json_grammar, "_budgeted", collecting)
    gc.callbacks.append(burn)
    try:
        started = time.thread_time()
        grammar = json_grammar.schema_grammar(schema, "tools")
        spent = time.thread_time() - started
    finally:
        gc.callbacks.remove(burn)
    assert collected and spent > slow_collection  # the collection ran inside, at its full cost
    assert "root ::=" in grammar
