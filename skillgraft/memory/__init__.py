"""The memory an agent calls: the :class:`SkillMemory` facade and what is its own —
blocks (:mod:`.blocks`), deposits (:mod:`.deposits`), expiry (:mod:`.expiry`), copying a store
(:mod:`.migrate`) and apps' prefixes (:mod:`.app_prefixes`). Agent Skills folders are
:mod:`skillgraft.skills`' (their records are named here too).
"""

from ..skills import CacheReport, EvalAnswer, EvalOutcome, ImportedSkill, SkillAnswerEval, SkillCacheRow
from ..skills import SkillExport, SkillImportReport, SkillPart, SkillRecord, SkillTriggerScore, SkillWarmReport, WarmJob
from .app_prefixes import AppPrefix
from .expiry import ExpiryRecord
from .facade import SkillMemory
from .blocks import RecaptureReport

__all__ = [
    "AppPrefix", "CacheReport", "EvalAnswer", "EvalOutcome", "ExpiryRecord", "ImportedSkill",
    "RecaptureReport", "SkillAnswerEval", "SkillCacheRow", "SkillExport", "SkillImportReport", "SkillMemory",
    "SkillPart", "SkillRecord", "SkillTriggerScore", "SkillWarmReport", "WarmJob",
]


def __getattr__(name: str):
    if name in ("Generation", "generation_of"):
        return deprecated_answer_name(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def deprecated_answer_name(name: str, stacklevel: int = 3):
    """The names of the old answer type, for one release (warned): ``generate`` returns an
    :class:`~skillgraft.core.answer.Answer` (the one answer type), which reads by the same names."""
    import warnings

    from ..core.answer import Answer

    warnings.warn(f"skillgraft's {name} is deprecated: generate returns an Answer, which reads by the same names",
                  DeprecationWarning, stacklevel=stacklevel)
    return Answer if name == "Generation" else (lambda answer: answer)
