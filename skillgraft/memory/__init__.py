"""The memory an agent calls: the :class:`SkillMemory` facade and what is its own —
deposits (:mod:`.deposits`), upkeep (:mod:`.upkeep`), expiry (:mod:`.expiry`), copying a store
(:mod:`.migrate`) and Agent Skills folders (:mod:`.skill_import`, :mod:`.skills`, :mod:`.skill_warm`, :mod:`.skill_cache`,
:mod:`.app_prefixes`, :mod:`.skill_evals`, and
:mod:`.answer_evals` over :mod:`.eval_cases`).
"""

from .answer_evals import EvalAnswer, EvalOutcome, SkillAnswerEval
from .app_prefixes import AppPrefix
from .expiry import ExpiryRecord
from .facade import Generation, SkillMemory, generation_of
from .skill_evals import SkillTriggerScore
from .skill_import import ImportedSkill, SkillImportReport
from .skill_cache import CacheReport, SkillCacheRow
from .skill_warm import SkillWarmReport, WarmJob
from .skills import SkillExport, SkillPart, SkillRecord
from .upkeep import RecaptureReport

__all__ = [
    "AppPrefix", "CacheReport", "EvalAnswer", "EvalOutcome", "ExpiryRecord", "Generation", "ImportedSkill",
    "RecaptureReport", "SkillAnswerEval", "SkillCacheRow", "SkillExport", "SkillImportReport", "SkillMemory",
    "SkillPart", "SkillRecord", "SkillTriggerScore", "SkillWarmReport", "WarmJob", "generation_of",
]
