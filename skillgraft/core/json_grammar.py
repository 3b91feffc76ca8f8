"""JSON schemas as GBNF grammars: the one grammar both engines constrain an answer with.

The conversion is llama.cpp's own JSON-schema converter as llama-cpp-python ports it to
Python (``llama_cpp/llama_grammar.py``, standard library only). It is loaded from its file
alone: importing it through its package would load the native library, which a door that
only renders (the gateway's parent process, the fakes) does not need. The GBNF text it
makes is what the in-process sampler and llama-server's ``/completion`` (its ``grammar``
field) are both given, so the two engines constrain an answer identically.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Optional

from ..errors import FormatError
from .schema_budget import check_schema

MAX_SCHEMA_CHARS = 64_000
MAX_GRAMMAR_CHARS = 256_000
# The conversion's own budget, after the schema has passed :func:`check_schema`: what is left
# of its cost (rule names looked up again and again) is stopped here, never paid in full.
CONVERT_BUDGET_S = 0.5

_converter: Optional[ModuleType] = None
_lock = threading.Lock()
_collector = threading.local()
_converting = 0  # conversions running; the collector is timed only while there are any


def _collection_starts(phase: str, info: dict) -> None:
    """``gc`` callbacks, first and last of the list: the CPU time each thread spends in a
    collection (the collector and every other callback), which a budget of its own work must
    not count (a full collection of a large process takes a second or more: a 2 ms conversion
    was refused once one ran inside it)."""
    if phase == "start":
        _collector.started = time.thread_time()


def _collection_stops(phase: str, info: dict) -> None:
    if phase == "stop" and hasattr(_collector, "started"):
        _collector.spent = getattr(_collector, "spent", 0.0) + time.thread_time() - _collector.started
        del _collector.started


@contextmanager
def _collections_timed():
    """While at least one conversion runs, the collections are timed (:func:`_collection_starts`)."""
    global _converting
    with _lock:
        _converting += 1
        if _converting == 1:
            gc.callbacks.insert(0, _collection_starts)
            gc.callbacks.append(_collection_stops)
    try:
        yield
    finally:
        with _lock:
            _converting -= 1
            if _converting == 0:
                gc.callbacks.remove(_collection_starts)
                gc.callbacks.remove(_collection_stops)


def _own_cpu_time() -> float:
    """This thread's CPU time, less what the garbage collector took of it."""
    return time.thread_time() - getattr(_collector, "spent", 0.0)


def _load() -> ModuleType:
    global _converter
    with _lock:
        if _converter is None:
            spec = importlib.util.find_spec("llama_cpp")  # a top-level spec: the package is not imported
            folders = list(spec.submodule_search_locations or []) if spec else []
            path = next((Path(f) / "llama_grammar.py" for f in folders if (Path(f) / "llama_grammar.py").is_file()), None)
            if path is None:
                raise FormatError("response_format", "JSON grammars need llama-cpp-python (its llama_grammar module)")
            loader = importlib.util.spec_from_file_location("skillgraft._llama_json_grammar", path)
            module = importlib.util.module_from_spec(loader)
            loader.loader.exec_module(module)
            _converter = module
        return _converter


class _OverBudget(Exception):
    pass


def _budgeted(module: ModuleType):
    """The converter's class, stopped (:class:`_OverBudget`) once its rules pass
    :data:`MAX_GRAMMAR_CHARS` or its CPU time :data:`CONVERT_BUDGET_S` (the collector's
    excluded, :func:`_own_cpu_time`): every rule it writes goes through ``_add_rule``."""

    class Budgeted(module.SchemaConverter):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self._deadline = _own_cpu_time() + CONVERT_BUDGET_S
            self._chars = 0

        def _add_rule(self, name, rule):
            if _own_cpu_time() > self._deadline:
                raise _OverBudget(f"turning it into a grammar took more than {CONVERT_BUDGET_S} s")
            count = len(self._rules)
            key = super()._add_rule(name, rule)
            if len(self._rules) > count:  # a new rule (one written again is the same text)
                self._chars += len(rule)
                if self._chars > MAX_GRAMMAR_CHARS:
                    raise _OverBudget(f"its grammar would be more than {MAX_GRAMMAR_CHARS:,} characters")
            return key

    return Budgeted


def _convert(schema: dict) -> str:
    """What ``json_schema_to_gbnf`` does, with the budgeted converter."""
    module = _load()
    with _collections_timed():
        converter = _budgeted(module)(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
        converter.visit(converter.resolve_refs(schema, "stdin"), "")
        return converter.format_grammar()


def schema_grammar(schema: dict, field: str = "response_format") -> str:
    """The GBNF grammar of the JSON values ``schema`` allows; :class:`FormatError` naming
    ``field`` (the request field it came from) when the schema is over a budget of
    :mod:`skillgraft.core.schema_budget` or this module's, or cannot be converted."""
    check_schema(schema, field)
    try:
        text = json.dumps(schema)
        json.dumps(schema, ensure_ascii=False).encode("utf-8")  # a lone surrogate is no text a prompt can hold
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise FormatError(field, f"the JSON schema is not JSON: {exc}") from None
    if len(text) > MAX_SCHEMA_CHARS:
        raise FormatError(field, f"the JSON schema is {len(text):,} characters; at most {MAX_SCHEMA_CHARS:,} are taken")
    try:
        grammar = _convert(json.loads(text))
    except FormatError:
        raise
    except _OverBudget as exc:
        raise FormatError(field, f"the JSON schema is too costly: {exc}") from None
    except Exception as exc:  # the converter raises bare exceptions of several kinds (recursion too)
        raise FormatError(field, f"the JSON schema cannot be turned into a grammar: {type(exc).__name__}: {exc}") from None
    if len(grammar) > MAX_GRAMMAR_CHARS:
        raise FormatError(field, f"the JSON schema makes a grammar of {len(grammar):,} characters; at most {MAX_GRAMMAR_CHARS:,}")
    return grammar
