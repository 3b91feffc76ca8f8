"""The measures a with-and-without comparison reports, the same wherever one is made (the
skills-effect benchmark, ``skills eval``, the router's calibration): a pass rate with its 95 %
Wilson interval, and per answer the mean prompt tokens, the median time to the first token and
the median total time."""

from __future__ import annotations

import math
import time
from statistics import fmean, median
from typing import Iterable, Iterator, Optional, Sequence

__all__ = ["Z95", "FirstText", "answer_costs", "pass_rate", "wilson"]

Z95 = 1.959963984540054


def wilson(passed: int, n: int, z: float = Z95, *,
           places: Optional[int] = None) -> tuple[Optional[float], Optional[float]]:
    """The Wilson score interval of a pass rate (95 % by default), rounded to ``places``
    decimals if given; (None, None) for no trials."""
    if n <= 0:
        return None, None
    rate = passed / n
    centre = (rate + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    low, high = max(0.0, centre - half), min(1.0, centre + half)
    return (low, high) if places is None else (round(low, places), round(high, places))


def pass_rate(outcomes: Iterable[bool]) -> dict:
    """``n``, ``passed``, ``pass_rate`` (None for no trials) and its interval ``ci_low``, ``ci_high``."""
    outcomes = list(outcomes)
    n, passed = len(outcomes), sum(bool(o) for o in outcomes)
    low, high = wilson(passed, n)
    return {"n": n, "passed": passed, "pass_rate": passed / n if n else None, "ci_low": low, "ci_high": high}


def answer_costs(prompt_tokens: Sequence[int], ttft_s: Sequence[float], total_s: Sequence[float]) -> dict:
    """Mean ``prompt_tokens``, median ``ttft_s`` and ``total_s`` of the answers (None for none)."""
    return {
        "prompt_tokens": fmean(prompt_tokens) if prompt_tokens else None,
        "ttft_s": median(ttft_s) if ttft_s else None,
        "total_s": median(total_s) if total_s else None,
    }


class FirstText:
    """An answer's events passed through unchanged; ``seconds`` is when the first text delta
    (a non-empty ``str`` event) came, counted from ``started`` (a :func:`time.perf_counter`)."""

    def __init__(self, events: Iterable, started: float) -> None:
        self.events, self.started, self.seconds = events, started, None

    def __iter__(self) -> Iterator:
        for event in self.events:
            if self.seconds is None and isinstance(event, str) and event:
                self.seconds = time.perf_counter() - self.started
            yield event
