"""The statistics of an abstain threshold: rates on calibration queries with Wilson intervals."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class RouterCalibration:
    """The abstain threshold :meth:`Router.calibrate` chose, and its rates on the calibration
    queries: in-domain ones routed right, abstained on (``false_abstain``) or sent to another
    block (``misroute``); out-of-domain ones abstained on (``ood_recall``) or routed
    (``false_accept``); each ``*_ci95`` a Wilson 95% interval."""

    threshold: float
    in_scope_accuracy: float
    false_abstain: float
    false_abstain_ci95: tuple[float, float]
    misroute: float
    false_accept: float
    false_accept_ci95: tuple[float, float]
    ood_recall: float
    in_domain: int
    out_of_domain: int

    def as_dict(self) -> dict:
        return asdict(self)


def wilson_interval(successes: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score 95% interval of a proportion."""
    if total == 0:
        return (0.0, 1.0)
    p = successes / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return (round(max(0.0, centre - half), 4), round(min(1.0, centre + half), 4))


def evaluate_threshold(threshold: float, in_best, targets, ood_best: np.ndarray) -> dict:
    """Rates of one threshold: false accepts (OOD routed), false abstains, misroutes."""
    accepted = [score >= threshold for _, score in in_best]
    right = sum(1 for (bid, _), ok, t in zip(in_best, accepted, targets) if ok and bid == t)
    abstained = sum(1 for ok in accepted if not ok)
    misrouted = len(targets) - right - abstained
    false_accepts = int((ood_best >= threshold).sum())
    n_in, n_ood = len(targets), len(ood_best)
    return {
        "in_scope_accuracy": round(right / n_in, 4),
        "false_abstain": round(abstained / n_in, 4),
        "false_abstain_ci95": wilson_interval(abstained, n_in),
        "misroute": round(misrouted / n_in, 4),
        "false_accept": round(false_accepts / n_ood, 4),
        "false_accept_ci95": wilson_interval(false_accepts, n_ood),
        "ood_recall": round(1 - false_accepts / n_ood, 4),
        "in_domain": n_in,
        "out_of_domain": n_ood,
    }
