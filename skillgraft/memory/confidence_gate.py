"""``memory.confidence_gate``: the threshold of the confidence gate after a graft — read from the
store (``gate.mean_logprob``, else the default) and chosen from grafted answers whose
correctness is known (:func:`~skillgraft.core.gate.calibrate_threshold`)."""

from __future__ import annotations

from typing import Sequence

from ..core.answer import AnswerOptions
from ..core.gate import DEFAULT_GATE_LOGPROB, GATE_SETTING, GateCalibration, GateCase, calibrate_threshold, confidence
from ..core.text_checks import clean_query

__all__ = ["ConfidenceGate"]


class ConfidenceGate:
    """``memory.confidence_gate``: its ``threshold`` and :meth:`calibrate`."""

    def __init__(self, memory) -> None:
        self.memory = memory

    @property
    def threshold(self) -> float:
        """The confidence gate's threshold: the store's ``gate.mean_logprob``, else the default."""
        stored = self.memory.store.setting(GATE_SETTING)
        return float(stored) if stored is not None else DEFAULT_GATE_LOGPROB

    def calibrate(self, cases: Sequence[tuple[str, str, str]], *, max_tokens: int = 32,
                  save: bool = True) -> GateCalibration:
        """Choose the gate threshold from grafted answers whose correctness is known.

        ``cases`` are ``(query, block name or id, text a right answer contains)``. The
        threshold is the highest that keeps every right answer; the report says how many
        wrong answers it turns away. It matters where the gate is enforced.
        """
        rows = []
        for query, block, expected in cases:
            answer = self.memory._forced(block, [("user", clean_query(query))], AnswerOptions(max_tokens=max_tokens))
            steps = answer.end.steps
            text = "".join(s.piece for s in steps)
            rows.append(GateCase(query, block, expected in text, confidence(steps, self.threshold).mean_logprob))
        report = calibrate_threshold(rows)
        if save:
            self.memory.store.set_setting(GATE_SETTING, repr(report.threshold))
        return report
