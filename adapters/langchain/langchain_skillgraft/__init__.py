"""LangChain integration for skillgraft.

- :class:`ChatSkillGraft`: a chat model on a skillgraft memory's llama.cpp context that
  grafts a block's KV state per call;
- :class:`SkillGraftMiddleware`: agent middleware that recalls before each model call
  (``exact`` answers, ``graft`` blocks, ``abstain`` passes through), with the core's
  near-miss and confidence fallbacks after a graft;
- :class:`SkillGraftRetriever`: up to ``k`` blocks the memory could graft, as Documents.
"""

from .chat_models import ChatSkillGraft
from .middleware import SkillGraftMiddleware
from .retrievers import SkillGraftRetriever
from .shared import close_shared_memories, open_memory

__version__ = "0.1.0"

__all__ = [
    "ChatSkillGraft",
    "SkillGraftMiddleware",
    "SkillGraftRetriever",
    "close_shared_memories",
    "open_memory",
]
