"""The memory an agent calls: the :class:`SkillMemory` facade and what is its own —
deposits (:mod:`.deposits`), upkeep (:mod:`.upkeep`), expiry (:mod:`.expiry`), copying a store
(:mod:`.migrate`) and Agent Skills folders (:mod:`.skill_import`, :mod:`.skills`, :mod:`.skill_warm`, :mod:`.skill_cache`,
:mod:`.app_prefixes`, :mod:`.skill_evals`, and
:mod:`.answer_evals` over :mod:`.eval_cases`).
"""

from .answer_evals import EvalAnswer, EvalOutcome, SkillAnswerEval
from .app_prefixes import AppPrefix
from .expiry import ExpiryRecord
from .facade import SkillMemory
from .skill_evals import SkillTriggerScore
from .skill_import import ImportedSkill, SkillImportReport
from .skill_cache import CacheReport, SkillCacheRow
from .skill_warm import SkillWarmReport, WarmJob
from .skills import SkillExport, SkillPart, SkillRecord
from .upkeep import RecaptureReport

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
