"""The confidence interval the router's calibration reports its false-accept rate with."""

from __future__ import annotations

from skillgraft.routing.router import wilson_interval


def test_wilson_interval():
    assert wilson_interval(0, 0) == (0.0, 1.0)
    low, high = wilson_interval(5, 100)
    assert 0.02 < low < 0.05 < high < 0.12
