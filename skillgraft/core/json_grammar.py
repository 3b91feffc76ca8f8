"""JSON schemas as GBNF grammars: the one grammar both engines constrain an answer with.

The conversion is llama.cpp's own JSON-schema converter as llama-cpp-python ports it to
Python (``llama_cpp/llama_grammar.py``, standard library only). It is loaded from its file
alone: importing it through its package would load the native library, which a door that
only renders (the gateway's parent process, the fakes) does not need. The GBNF text it
makes is what the in-process sampler and llama-server's ``/completion`` (its ``grammar``
field) are both given, so the two engines constrain an answer identically.
"""

from __future__ import annotations

import importlib.util
import json
import threading
from pathlib import Path
from types import ModuleType
from typing import Optional

from ..errors import FormatError

MAX_SCHEMA_CHARS = 64_000
MAX_GRAMMAR_CHARS = 256_000
MAX_DEPTH = 64
# llama.cpp's grammar parser refuses repetitions above 2,000; the converter would first spell
# a large minItems out in full (a hostile one would exhaust memory), so it is refused before.
MAX_REPETITION = 2_000
BOUNDS = ("minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties")

_converter: Optional[ModuleType] = None
_lock = threading.Lock()


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


def schema_grammar(schema: dict, field: str = "response_format") -> str:
    """The GBNF grammar of the JSON values ``schema`` allows; :class:`FormatError` naming
    ``field`` (the request field it came from) when the schema cannot be converted."""
    _check_shape(schema, field)
    try:
        text = json.dumps(schema)
    except (TypeError, ValueError) as exc:
        raise FormatError(field, f"the JSON schema is not JSON: {exc}") from None
    if len(text) > MAX_SCHEMA_CHARS:
        raise FormatError(field, f"the JSON schema is {len(text):,} characters; at most {MAX_SCHEMA_CHARS:,} are taken")
    try:
        grammar = _load().json_schema_to_gbnf(text)
    except FormatError:
        raise
    except Exception as exc:  # the converter raises bare exceptions of several kinds (recursion too)
        raise FormatError(field, f"the JSON schema cannot be turned into a grammar: {type(exc).__name__}: {exc}") from None
    if len(grammar) > MAX_GRAMMAR_CHARS:
        raise FormatError(field, f"the JSON schema makes a grammar of {len(grammar):,} characters; at most {MAX_GRAMMAR_CHARS:,}")
    return grammar


def _check_shape(schema, field: str) -> None:
    """Refuse a schema nested deeper than :data:`MAX_DEPTH` or with a repetition bound over
    :data:`MAX_REPETITION`, walking it without recursion."""
    pending = [(schema, 1)]
    while pending:
        node, depth = pending.pop()
        if depth > MAX_DEPTH:
            raise FormatError(field, f"the JSON schema is nested deeper than {MAX_DEPTH} levels")
        if isinstance(node, dict):
            for key in BOUNDS:
                bound = node.get(key)
                if isinstance(bound, (int, float)) and not isinstance(bound, bool) and bound > MAX_REPETITION:
                    raise FormatError(field, f"{key} {bound} is above {MAX_REPETITION:,}, the most llama.cpp's grammars repeat")
            pending.extend((value, depth + 1) for value in node.values())
        elif isinstance(node, list):
            pending.extend((value, depth + 1) for value in node)
