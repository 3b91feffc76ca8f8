"""The statistics of an abstain threshold: rates on calibration queries with Wilson intervals."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..core.measures import wilson
from ..core.text_checks import clean_query
from ..errors import InputError, RouterError

# An uncalibrated store's threshold: per encoder where it was measured (the catalog benchmark's
# calibrate half, docs/routing.md), else the earlier default.
DEFAULT_THRESHOLD = 0.3
ENCODER_THRESHOLDS = {"all-minilm-l6-v2": 0.51}


def encoder_threshold(name: str) -> float:
    """The default abstain threshold for vectors of the encoder ``name`` (the model's own name,
    however it is served: ``all-MiniLM-L6-v2``, ``openai:all-minilm-l6-v2``, a folder path)."""
    model = name.rsplit(":", 1)[-1].rstrip("/").rsplit("/", 1)[-1].lower()
    return ENCODER_THRESHOLDS.get(model, DEFAULT_THRESHOLD)
THRESHOLD_SETTING = "router.threshold"


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
        "false_abstain_ci95": wilson(abstained, n_in, places=4),
        "misroute": round(misrouted / n_in, 4),
        "false_accept": round(false_accepts / n_ood, 4),
        "false_accept_ci95": wilson(false_accepts, n_ood, places=4),
        "ood_recall": round(1 - false_accepts / n_ood, 4),
        "in_domain": n_in,
        "out_of_domain": n_ood,
    }


def calibrate_router(router, in_domain, out_of_domain, *, in_scope_tolerance: float, max_false_accept, save: bool):
    """:meth:`~skillgraft.routing.router.Router.calibrate`: the threshold chosen on ``router``'s rankings."""
    if not in_domain:
        raise InputError("calibration needs in-domain examples (query, block name)")
    if not out_of_domain:
        raise InputError(
            "calibration needs out-of-domain examples: without them no threshold can be measured "
            f"(the default {DEFAULT_THRESHOLD} stays in force)"
        )
    names = {b.name: b.id for b in router.store.blocks(include_quarantined=False)}
    ids = set(names.values())
    targets = []
    in_domain = list(in_domain)
    for number, pair in enumerate(in_domain, 1):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and isinstance(pair[1], str)):
            raise InputError(f"calibration example {number} is not a (query, block name) pair: {pair!r:.80}")
        query, ref = pair
        target = names.get(ref, ref)
        if target not in ids:
            raise InputError(f"calibration example {query!r} names an unknown block {ref!r}")
        targets.append(target)
    in_best = [r.best() for r in router.rankings([clean_query(q) for q, _ in in_domain])]
    # an imported skill is right whichever of its blocks is ranked first
    targets = [router._groups.get(t, t) for t in targets]
    in_best = [(router._groups.get(b, b) if b is not None else None, s) for b, s in in_best]
    ood_best = np.array([r.best()[1] for r in router.rankings([clean_query(q) for q in out_of_domain])])
    candidates = sorted({round(s, 4) for _, s in in_best} | {round(float(s) + 1e-4, 4) for s in ood_best})
    curve = [(t, evaluate_threshold(t, in_best, targets, ood_best)) for t in candidates]
    if max_false_accept is not None:
        curve = [(t, s) for t, s in curve if s["false_accept"] <= max_false_accept]
    if not curve:
        raise RouterError(f"no threshold keeps the false-accept rate under {max_false_accept}")
    floor = max(s["in_scope_accuracy"] for _, s in curve) - in_scope_tolerance
    threshold, stats = max(
        ((t, s) for t, s in curve if s["in_scope_accuracy"] >= floor - 1e-12),
        key=lambda item: (item[1]["ood_recall"], -item[0]),
    )
    if save:
        router.store.set_setting(THRESHOLD_SETTING, repr(float(threshold)))
    return RouterCalibration(threshold=float(threshold), **stats)

