"""The memory an agent calls: the :class:`SkillMemory` facade and what is its own —
deposits (:mod:`.deposits`), upkeep (:mod:`.upkeep`) and copying a store (:mod:`.migrate`).
"""

from .facade import Generation, SkillMemory, generation_of
from .upkeep import RecaptureReport

__all__ = ["Generation", "RecaptureReport", "SkillMemory", "generation_of"]
