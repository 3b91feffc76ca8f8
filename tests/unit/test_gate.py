"""The gate's value objects: confidence, verdicts and the calibrated threshold."""

from __future__ import annotations

import pytest

from skillgraft.errors import InputError
from skillgraft.core.gate import GateCase, GateVerdict, calibrate_threshold, confidence
from skillgraft.core.states import TokenStep


def steps(*logprobs: float) -> list[TokenStep]:
    return [TokenStep(65, "A", value, 0.0) for value in logprobs]


def test_confidence_takes_the_mean_of_the_first_tokens_only():
    sure = confidence(steps(*[-0.1] * 8, *[-9.0] * 8), -0.75)
    assert (sure.confident, sure.mean_logprob, sure.threshold) == (True, -0.1, -0.75)
    unsure = confidence(steps(-2.0, -1.0), -0.75)
    assert (unsure.confident, unsure.mean_logprob) == (False, -1.5) and "<" in unsure.reason
    assert confidence([], -0.75).mean_logprob is None and not confidence([], -0.75).confident


def test_a_verdict_serializes_with_every_field():
    verdict = GateVerdict(True, -0.2, -0.75, "sure", fell_back=False)
    assert verdict.as_dict() == {"confident": True, "mean_logprob": -0.2, "threshold": -0.75, "reason": "sure",
                                 "fell_back": False}


def test_the_calibrated_threshold_keeps_every_right_answer_and_counts_the_wrong_ones_refused():
    rows = [GateCase("q1", "a", True, -0.4), GateCase("q2", "a", True, -1.2), GateCase("q3", "b", False, -2.0),
            GateCase("q4", "b", False, -0.1), GateCase("q5", "b", False, None)]
    report = calibrate_threshold(rows)
    assert report.threshold == -1.205 and all(r.mean_logprob >= report.threshold for r in rows if r.correct)
    assert (report.cases, report.right, report.wrong, report.wrong_turned_away) == (5, 2, 3, 2)
    assert report.as_dict()["rows"][0] == {"query": "q1", "block": "a", "correct": True, "mean_logprob": -0.4}


def test_no_right_answer_cannot_calibrate():
    with pytest.raises(InputError, match="no grafted answer was right"):
        calibrate_threshold([GateCase("q", "b", False, -0.1)])
