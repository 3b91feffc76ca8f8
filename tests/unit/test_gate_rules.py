"""The rule search of the gate evaluation (benchmarks/gate_rules.py), on synthetic grafts."""

from __future__ import annotations

import importlib.util
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "gate_rules.py"
spec = importlib.util.spec_from_file_location("gate_rules", PATH)
gate_rules = importlib.util.module_from_spec(spec)
sys.modules.setdefault("gate_rules", gate_rules)
spec.loader.exec_module(gate_rules)
Rule, outcome, search, needed = gate_rules.Rule, gate_rules.outcome, gate_rules.search, gate_rules.needed


@dataclass(frozen=True)
class Graft:
    right: bool
    mean_logprob: float
    min_logprob: float = -5.0
    first_logprob: float = -5.0
    route_score: Optional[float] = 0.5
    margin: Optional[float] = 0.1


def test_needed_rounds_up_so_the_share_is_reached():
    assert [needed(n, 0.95) for n in (1, 19, 20, 21, 100)] == [1, 19, 19, 20, 95]


def test_one_threshold_keeps_95_percent_and_turns_away_what_lies_below():
    right = [Graft(True, round(-0.1 * i, 1)) for i in range(1, 21)]  # -0.1 ... -2.0
    wrong = [Graft(False, v) for v in (-1.85, -1.95, -3.0, -0.5)]
    rule, result = search(right + wrong, route=False)["mean_logprob"]
    assert rule == Rule("single", "mean_logprob", -1.9)  # the 19th best right value, floored
    assert (result.kept, result.right, result.turned_away, result.wrong) == (19, 20, 2, 4)
    assert result.as_dict()["kept_share"] == 0.95 and result.as_dict()["turned_away_ci95"][0] > 0


def test_a_route_number_joins_when_it_separates_what_log_probabilities_cannot():
    # Log-probabilities say nothing; the route margin of wrong grafts is small.
    rng = random.Random(0)
    right = [Graft(True, rng.uniform(-2, 0), margin=rng.uniform(0.1, 0.4)) for _ in range(200)]
    wrong = [Graft(False, rng.uniform(-2, 0), margin=rng.uniform(0.0, 0.05)) for _ in range(100)]
    found = search(right + wrong)
    assert found["mean_logprob"][1].turned_away <= 15
    rule, result = found["margin"]
    assert result.turned_away == 100 and result.kept >= 190
    for family in ("mean_logprob AND margin", "mean_logprob OR margin", "mean_logprob + w * margin"):
        assert found[family][1].kept >= needed(200, 0.95), family
    assert found["mean_logprob AND margin"][1].turned_away == 100
    assert "route_score" not in search(right + wrong, route=False)


def test_and_or_and_linear_rules_read_both_numbers():
    sure = Graft(True, -0.2, route_score=0.6)
    assert Rule("and", "mean_logprob", -1.0, "route_score", 0.7).keeps(sure) is False
    assert Rule("or", "mean_logprob", -1.0, "route_score", 0.7).keeps(sure) is True
    assert Rule("linear", "mean_logprob", 0.9, "route_score", None, 2.0).keeps(sure) is True  # -0.2 + 1.2
    assert Rule("linear", "mean_logprob", 0.9, "route_score", None, 2.0).describe() == \
        "mean_logprob + 2 * route_score >= 0.9"
    assert Rule("and", "mean_logprob", -1.0, "margin", 0.05).describe() == "mean_logprob >= -1 AND margin >= 0.05"


def test_a_missing_route_score_keeps_nothing_and_the_outcome_counts_it():
    grafts = [Graft(True, -0.1, route_score=None), Graft(False, -0.1, route_score=None)]
    result = outcome(Rule("single", "route_score", 0.0), grafts)
    assert (result.kept, result.turned_away) == (0, 1)


def test_an_empty_family_is_left_out_and_shares_of_nothing_are_zero():
    assert search([Graft(False, -1.0)], route=False) == {}
    result = outcome(Rule("single", "mean_logprob", -1.0), [])
    assert (result.kept_share, result.turned_away_share) == (0.0, 0.0)
    assert result.as_dict()["kept_ci95"] == (None, None)  # the shared measures' interval of no trials


@pytest.mark.parametrize("min_kept", [0.9, 0.95, 1.0])
def test_every_chosen_rule_keeps_the_share_it_was_asked_for(min_kept):
    rng = random.Random(1)
    grafts = [Graft(rng.random() < 0.7, rng.gauss(-1, 0.5), rng.gauss(-3, 1), rng.gauss(-2, 1), rng.random(), rng.random() / 3)
              for _ in range(300)]
    need = needed(sum(g.right for g in grafts), min_kept)
    for name, (rule, result) in search(grafts, min_kept=min_kept).items():
        assert result == outcome(rule, grafts) and result.kept >= need, name
