"""skillgraft: a verified memory of skills for a frozen local language model.

Skill manuals and verified solutions are prefilled once; their KV state is captured
byte-exactly into block files and grafted back into fresh contexts at their own position.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from .core.answer import Answer, AnswerNote, AnswerOptions
from .core.blocks import Block
from .config import EngineSettings
from .errors import (
    BlockIntegrityError,
    BlockNotFoundError,
    BundleError,
    ConfigError,
    ConflictError,
    ContextOverflowError,
    EmbedderError,
    EncoderMismatchError,
    EngineError,
    FingerprintMismatchError,
    FormatError,
    InputError,
    ModelNotFoundError,
    RouterError,
    SkillgraftError,
    StoreError,
    VerificationError,
)
from .core.fingerprint import RuntimeFingerprint
from .flywheel import SolveResult, solve
from .core.gate import Confidence, GateCalibration, GateVerdict
from .memory import Generation, SkillMemory
from .routing.feedback import FeedbackResult
from .routing.router import Embedder, Recall, RouterCalibration
from .core.states import KVState, TokenStep
from .store.block_store import BlockStore
from .store.check import CheckReport
from .core.timings import Timings
from .core.tools import OutputFormat, Tool, ToolCall, output_format
from .verify.verifiers import CallableVerifier, ExactVerifier, NumericVerifier, PythonVerifier, Verdict, Verifier

__version__ = "0.1.0"


if _TYPE_CHECKING:  # for type checkers and the API docs; at run time it is imported on first use
    from .engine.llama import Engine

# Names whose modules load native code (llama.cpp): imported on first use, never by `import skillgraft`.
_LAZY = {"Engine": "engine"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'skillgraft' has no attribute {name!r}")

__all__ = [
    "Answer",
    "AnswerNote",
    "AnswerOptions",
    "Block",
    "BlockIntegrityError",
    "BlockNotFoundError",
    "BlockStore",
    "BundleError",
    "CallableVerifier",
    "CheckReport",
    "Confidence",
    "ConfigError",
    "ConflictError",
    "ContextOverflowError",
    "Embedder",
    "EmbedderError",
    "EncoderMismatchError",
    "Engine",
    "EngineError",
    "EngineSettings",
    "ExactVerifier",
    "FeedbackResult",
    "FingerprintMismatchError",
    "FormatError",
    "GateCalibration",
    "GateVerdict",
    "Generation",
    "InputError",
    "KVState",
    "ModelNotFoundError",
    "NumericVerifier",
    "OutputFormat",
    "PythonVerifier",
    "Recall",
    "RouterCalibration",
    "RouterError",
    "RuntimeFingerprint",
    "SkillMemory",
    "SkillgraftError",
    "SolveResult",
    "StoreError",
    "Timings",
    "TokenStep",
    "Tool",
    "ToolCall",
    "Verdict",
    "VerificationError",
    "Verifier",
    "output_format",
    "solve",
]
