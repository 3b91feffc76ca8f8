"""The confidence intervals the router's calibration reports its rates with: the shared
measures' Wilson interval (:func:`skillgraft.core.measures.wilson`), to four places."""

from __future__ import annotations

import numpy as np

from skillgraft.core.measures import wilson
from skillgraft.routing.router import evaluate_threshold


def test_wilson_interval_to_four_places():
    assert wilson(0, 0, places=4) == (None, None)
    assert wilson(5, 100, places=4) == (0.0215, 0.1118)
    assert wilson(0, 4, places=4) == (0.0, 0.4899) and wilson(4, 4, places=4)[1] == 1.0


def test_calibration_rates_carry_the_shared_interval():
    # 10 in-domain queries: 7 right, 2 below the threshold, 1 sent to another block; 5 out of domain, 1 accepted.
    in_best = [("a", 0.9)] * 7 + [("a", 0.1)] * 2 + [("b", 0.8)]
    rates = evaluate_threshold(0.5, in_best, ["a"] * 10, np.array([0.1, 0.2, 0.3, 0.4, 0.6]))
    assert (rates["false_abstain"], rates["misroute"], rates["false_accept"]) == (0.2, 0.1, 0.2)
    assert rates["false_abstain_ci95"] == wilson(2, 10, places=4) == (0.0567, 0.5098)
    assert rates["false_accept_ci95"] == wilson(1, 5, places=4) == (0.0362, 0.6245)
