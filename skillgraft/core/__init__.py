"""The model-free centre: blocks, KV states, the runtime fingerprint, questions, the gate,
sampling and the chat layout after a grafted block. No llama.cpp, no torch."""

from .fingerprint import RuntimeFingerprint
from .gate import Confidence, GateCalibration
from .states import KVState
from .tools import output_format, tool_calls_turn, tool_result_turn

__all__ = [
    "Confidence", "GateCalibration", "KVState", "RuntimeFingerprint", "output_format", "tool_calls_turn", "tool_result_turn",
]
