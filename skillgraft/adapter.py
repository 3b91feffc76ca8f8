"""What a framework's adapter builds on (``langchain_skillgraft`` is one): the memory, the
answer pipeline's values, the chat and tool shapes, and the few functions a door calls. An
adapter imports from here and from :mod:`skillgraft`, nothing deeper, so the package's inner
layout can change under it.

- open a memory (:class:`SkillMemory`, :func:`default_home`, :func:`default_model`, :class:`Embedder`);
- answer through the pipeline (:meth:`SkillMemory.stream` with :class:`AnswerOptions`), reading
  its :class:`AnswerNote`, text deltas and :class:`AnswerEnd`; a block the caller names is
  :meth:`memory.blocks.forced_graft <skillgraft.memory.blocks.Blocks.forced_graft>` (the memory's rule: an expired one is refused, a namespace's
  base is read), no recall at all a :func:`forced_recall`; a routed candidate is read with
  :meth:`memory.blocks.get <skillgraft.memory.blocks.Blocks.get>` (a namespace's block or its base's);
- hand a routed skill's text to a model skillgraft does not run (:func:`skill_context`), placed
  where the one rule places a chat's skills (:func:`skill_places`), and report that decision with
  :func:`answer_note`;
- hold an answer to tools or JSON (:func:`output_format`, :class:`OutputFormat`, :class:`ToolCall`)
  and carry tool turns in a chat (:func:`tool_calls_turn`, :func:`tool_result_turn`).
"""

from .config import default_home, default_model
from .core.answer import Answer, AnswerEnd, AnswerNote, AnswerOptions
from .core.blocks import Block
from .core.gate import Confidence, GateVerdict
from .core.pipeline import answer_note
from .core.placement import skill_places
from .core.planning import forced_recall
from .core.recall import Recall
from .core.skill_text import skill_context
from .core.states import TokenStep
from .core.tools import OutputFormat, ToolCall, output_format, tool_calls_turn, tool_result_turn
from .memory import SkillMemory
from .routing.router import Embedder

__all__ = [
    "Answer",
    "AnswerEnd",
    "AnswerNote",
    "AnswerOptions",
    "Block",
    "Confidence",
    "Embedder",
    "GateVerdict",
    "OutputFormat",
    "Recall",
    "SkillMemory",
    "TokenStep",
    "ToolCall",
    "answer_note",
    "default_home",
    "default_model",
    "forced_recall",
    "output_format",
    "skill_context",
    "skill_places",
    "tool_calls_turn",
    "tool_result_turn",
]
