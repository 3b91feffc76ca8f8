"""Agent Skills: ``memory.skills`` (:class:`Skills`, :mod:`.component`), the face every door
calls, over a skill folder read as untrusted input (:mod:`.folder`, :mod:`.frontmatter`,
:mod:`.scan`), planned into parts that fit the window (:mod:`.plan`, :mod:`.section_pack`,
:mod:`.manual_split`, :mod:`.window_fit`), imported with its keys (:mod:`.importing`,
:mod:`.keys`), kept as versions (:mod:`.versions`), warmed (:mod:`.warm`), pinned in the KV
cache (:mod:`.cache`) and evaluated (:mod:`.trigger_evals`, :mod:`.answer_evals` over
:mod:`.eval_cases`)."""

from .answer_evals import EvalAnswer, EvalOutcome, SkillAnswerEval
from .cache import CacheReport, SkillCacheRow
from .component import Skills
from .importing import ImportedSkill, SkillImportReport
from .trigger_evals import SkillTriggerScore
from .versions import SkillExport, SkillPart, SkillRecord
from .warm import SkillWarmReport, WarmJob

__all__ = [
    "CacheReport", "EvalAnswer", "EvalOutcome", "ImportedSkill", "SkillAnswerEval", "SkillCacheRow", "SkillExport",
    "SkillImportReport", "SkillPart", "SkillRecord", "SkillTriggerScore", "SkillWarmReport", "Skills", "WarmJob",
]
