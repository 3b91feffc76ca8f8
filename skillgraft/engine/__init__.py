"""The in-process llama.cpp engine: native setup, state I/O, tokenizer and chat template,
and the embedded models.

``Engine`` is imported on first use: importing this package loads no llama.cpp.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

if _TYPE_CHECKING:
    from .llama import Engine

__all__ = ["Engine"]


def __getattr__(name: str):
    if name == "Engine":
        from .llama import Engine

        return Engine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
