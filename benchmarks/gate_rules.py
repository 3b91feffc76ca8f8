"""Searching keep-rules for the confidence gate on labelled grafts (used by gate_eval.py).

A rule keeps a grafted answer or turns it away from a few numbers known at that point: the
log-probabilities of the first generated tokens (mean, min, first), the route score of the
grafted block and the route margin (best minus runner-up score). On a calibration sample
:func:`search` picks, in each family of rules, the one that keeps at least ``min_kept`` of the
right-block grafts while turning away the most wrong-block grafts; :func:`outcome` reports a
rule on another sample with Wilson 95% intervals.

Families: one feature against a threshold; a log-probability AND / OR a route number, each
against its own threshold; and a linear rule ``logprob + w * route number >= t``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Protocol, Sequence

import numpy as np

from skillgraft.core.measures import wilson

LOGPROBS = ("mean_logprob", "min_logprob", "first_logprob")
ROUTE = ("route_score", "margin")
WEIGHTS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)


class Graft(Protocol):
    """What a rule reads from a labelled graft."""

    right: bool
    mean_logprob: float
    min_logprob: float
    first_logprob: float
    route_score: Optional[float]
    margin: Optional[float]


@dataclass(frozen=True)
class Rule:
    """Keep a graft when ``a >= t_a`` (kind ``single``), ``a >= t_a and b >= t_b`` (``and``),
    ``a >= t_a or b >= t_b`` (``or``), or ``a + weight * b >= t_a`` (``linear``)."""

    kind: str
    a: str
    t_a: float
    b: Optional[str] = None
    t_b: Optional[float] = None
    weight: Optional[float] = None

    def keeps(self, graft: Graft) -> bool:
        return bool(self.mask(_columns([graft]))[0])

    def mask(self, columns: dict[str, np.ndarray]) -> np.ndarray:
        """Which grafts of :func:`_columns` the rule keeps (a missing number keeps nothing)."""
        x = columns[self.a]
        if self.kind == "single":
            return x >= self.t_a
        y = columns[self.b]
        if self.kind == "and":
            return (x >= self.t_a) & (y >= self.t_b)
        if self.kind == "or":
            return (x >= self.t_a) | (y >= self.t_b)
        return x + self.weight * y >= self.t_a

    def describe(self) -> str:
        if self.kind == "single":
            return f"{self.a} >= {self.t_a:g}"
        if self.kind == "linear":
            return f"{self.a} + {self.weight:g} * {self.b} >= {self.t_a:g}"
        return f"{self.a} >= {self.t_a:g} {self.kind.upper()} {self.b} >= {self.t_b:g}"

    def as_dict(self) -> dict:
        return {"rule": self.describe(), "kind": self.kind, "a": self.a, "t_a": self.t_a, "b": self.b,
                "t_b": self.t_b, "weight": self.weight}


@dataclass(frozen=True)
class Outcome:
    """A rule on a sample: right-block grafts kept, wrong-block grafts turned away."""

    kept: int
    right: int
    turned_away: int
    wrong: int

    @property
    def kept_share(self) -> float:
        return self.kept / self.right if self.right else 0.0

    @property
    def turned_away_share(self) -> float:
        return self.turned_away / self.wrong if self.wrong else 0.0

    def as_dict(self) -> dict:
        return {
            "right": self.right, "kept": self.kept, "kept_share": round(self.kept_share, 4),
            "kept_ci95": wilson(self.kept, self.right, places=4),
            "wrong": self.wrong, "turned_away": self.turned_away,
            "turned_away_share": round(self.turned_away_share, 4),
            "turned_away_ci95": wilson(self.turned_away, self.wrong, places=4),
        }


def _columns(grafts: Sequence[Graft]) -> dict[str, np.ndarray]:
    """The numbers rules read, one array each (NaN where missing), and ``right``."""
    columns = {name: np.array([getattr(g, name) for g in grafts], dtype=float) for name in LOGPROBS + ROUTE}
    columns["right"] = np.array([bool(g.right) for g in grafts], dtype=bool)
    return columns


def _outcome(rule: Rule, columns: dict[str, np.ndarray]) -> Outcome:
    with np.errstate(invalid="ignore"):
        kept = rule.mask(columns)
    right = columns["right"]
    return Outcome(int((kept & right).sum()), int(right.sum()), int((~kept & ~right).sum()), int((~right).sum()))


def outcome(rule: Rule, grafts: Sequence[Graft]) -> Outcome:
    """``rule`` on ``grafts``: right ones kept, wrong ones turned away."""
    return _outcome(rule, _columns(grafts))


def _floor(value: float) -> float:
    """``value`` rounded down to 4 decimals, so a rule keeps every graft it was placed on."""
    steps = math.floor(value * 10_000)
    return steps / 10_000 if steps / 10_000 <= value else (steps - 1) / 10_000


def _threshold(values: np.ndarray, need: int) -> Optional[float]:
    """The highest threshold that keeps ``need`` of ``values`` (None when there are too few)."""
    values = np.sort(values[~np.isnan(values)])[::-1]
    return _floor(float(values[need - 1])) if 0 < need <= len(values) else None


def _best(rules, columns: dict[str, np.ndarray], need: int) -> Optional[tuple[Rule, Outcome]]:
    """The rule keeping ``need`` right grafts that turns away the most wrong ones (then keeps the most)."""
    best = None
    for rule in rules:
        result = _outcome(rule, columns)
        if result.kept >= need and (best is None or (result.turned_away, result.kept) > (best[1].turned_away, best[1].kept)):
            best = (rule, result)
    return best


def _singles(columns, a: str, need: int) -> list[Rule]:
    t = _threshold(columns[a][columns["right"]], need)
    return [] if t is None else [Rule("single", a, t)]


def _pairs(columns, a: str, b: str, need: int, kind: str) -> list[Rule]:
    """For each threshold on ``a`` (one per right graft's value), the highest threshold on
    ``b`` that still keeps ``need`` right grafts."""
    x, y = columns[a][columns["right"]], columns[b][columns["right"]]
    rules = []
    for t_a in sorted({_floor(v) for v in x}):
        passing = x >= t_a
        if kind == "and":
            t_b = _threshold(y[passing], need)
        elif passing.sum() >= need:
            rules.append(Rule("single", a, t_a))
            continue
        else:
            t_b = _threshold(y[~passing], need - int(passing.sum()))
        if t_b is not None:
            rules.append(Rule(kind, a, t_a, b, t_b))
    return rules


def _linear(columns, a: str, b: str, need: int) -> list[Rule]:
    right = columns["right"]
    rules = []
    for w in WEIGHTS:
        t = _threshold(columns[a][right] + w * columns[b][right], need)
        if t is not None:
            rules.append(Rule("linear", a, t, b, None, w))
    return rules


def auc(right: Sequence[float], wrong: Sequence[float]) -> Optional[float]:
    """The chance that a right graft's number exceeds a wrong one's (ties count half); 0.5 is no signal."""
    if not right or not wrong:
        return None
    x, y = np.asarray(right, dtype=float)[:, None], np.asarray(wrong, dtype=float)[None, :]
    return round(float((x > y).mean() + 0.5 * (x == y).mean()), 4)


def needed(right: int, min_kept: float) -> int:
    """How many of ``right`` grafts a rule must keep to keep at least ``min_kept`` of them."""
    return math.ceil(min_kept * right - 1e-9)


def search(grafts: Sequence[Graft], *, min_kept: float = 0.95, route: bool = True) -> dict[str, tuple[Rule, Outcome]]:
    """The best rule of each family on ``grafts`` (``route``: also rules reading route numbers).

    Keys name the family (``mean_logprob``, ``mean_logprob AND route_score``, ...); each value
    is the rule and its outcome on ``grafts``. A family with no rule keeping enough is left out.
    """
    columns = _columns(grafts)
    need = needed(int(columns["right"].sum()), min_kept)
    families = {a: _singles(columns, a, need) for a in LOGPROBS}
    if route:
        for b in ROUTE:
            families[b] = _singles(columns, b, need)
            for a in LOGPROBS:
                families[f"{a} AND {b}"] = _pairs(columns, a, b, need, "and")
                families[f"{a} OR {b}"] = _pairs(columns, a, b, need, "or")
                families[f"{a} + w * {b}"] = _linear(columns, a, b, need)
    found = {name: _best(rules, columns, need) for name, rules in families.items()}
    return {name: best for name, best in found.items() if best is not None}
