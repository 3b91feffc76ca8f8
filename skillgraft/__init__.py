"""skillgraft: a verified memory of skills for a frozen local language model.

Skill manuals and verified solutions are prefilled once; their KV state is captured
byte-exactly into block files and grafted back into fresh contexts at their own position.

This namespace is the facade (:class:`SkillMemory`, :func:`solve`), what its answers are made
of and the base errors. The rest lives in documented subpackages: every error in
:mod:`skillgraft.errors`, the store in :mod:`skillgraft.store`, routing in
:mod:`skillgraft.routing`, verifiers in :mod:`skillgraft.verify`, the model-free values
(KV states, fingerprints, the gate) in :mod:`skillgraft.core`, the engine in
:mod:`skillgraft.engine` and its settings in :mod:`skillgraft.config`; adapters build on
:mod:`skillgraft.adapter`.
"""

from .core.answer import Answer, AnswerEnd, AnswerNote, AnswerOptions
from .core.blocks import Block
from .core.gate import GateVerdict
from .core.recall import Recall
from .core.states import TokenStep
from .core.timings import Timings
from .core.tools import OutputFormat, Tool, ToolCall
from .errors import ConfigError, EngineError, InputError, SkillgraftError, StoreError, VerificationError
from .flywheel import SolveResult, solve
from .memory import SkillMemory

__version__ = "0.1.0"

__all__ = [
    "Answer",
    "AnswerEnd",
    "AnswerNote",
    "AnswerOptions",
    "Block",
    "ConfigError",
    "EngineError",
    "GateVerdict",
    "InputError",
    "OutputFormat",
    "Recall",
    "SkillMemory",
    "SkillgraftError",
    "SolveResult",
    "StoreError",
    "Timings",
    "TokenStep",
    "Tool",
    "ToolCall",
    "VerificationError",
    "solve",
]


def __getattr__(name: str):
    """``Generation``, the old answer type, for one release (warned): use :class:`Answer`."""
    if name == "Generation":
        from .memory import deprecated_answer_name

        return deprecated_answer_name(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
