"""The rows of the agent benchmarks (:mod:`.agent`, :mod:`.agent_local`): requests recorded
with progress, and one table row per scenario and measure."""

from __future__ import annotations

import statistics
import time
from typing import Callable, Iterator, Sequence

from ..core.progress import Progress


def recorder(total: int, progress: Progress) -> tuple[list[dict], Callable[[dict], None]]:
    """The request rows of a run and the function that adds one, reporting progress of ``total``."""
    records: list[dict] = []

    def record(row: dict) -> None:
        records.append(row)
        if progress:
            progress(len(records), total)

    return records, record


def take_turns(runs: Sequence[tuple[Iterator, float]]) -> None:
    """Run the systems' scenarios side by side: each ``(segments, pause_s)`` runs a segment in
    turn (the iterator yields once a segment is done) and then idles ``pause_s`` seconds; the
    one going first alternates from round to round, so a machine that drifts slower or faster
    during a run weighs on every system alike."""
    order = list(runs)
    while order:
        for run in list(order):
            segments, pause_s = run
            if next(segments, None) is None:
                order.remove(run)
            elif pause_s:
                time.sleep(pause_s)
        order.reverse()


def seconds(records: Sequence[dict], system: str, scenario: str, rounds=None) -> list[float]:
    """The seconds of ``system``'s requests in ``scenario`` (of ``rounds`` only, when given)."""
    return [r["seconds"] for r in records if r["system"] == system and r["scenario"] == scenario
            and (rounds is None or r["round"] in rounds)]


def compared_row(records: Sequence[dict], other: str, scenario: str, measure: str, rounds=None, *,
                 total: bool = False) -> dict:
    """:func:`request_row` of ``scenario``: skillgraft's requests against ``other``'s."""
    return request_row(scenario, measure, seconds(records, "skillgraft", scenario, rounds),
                       seconds(records, other, scenario, rounds), total=total)


def request_row(scenario: str, measure: str, ours: list[float], theirs: list[float], *, total: bool = False) -> dict:
    """One table row: skillgraft's and llama-server's median (or total), spread and ratio; with
    as many requests on each side (the same requests, taken in turn), ``paired_ratio``: the
    median of each request's ratio, which a machine drifting between requests weighs on less."""
    (a, a_lo, a_hi), (b, b_lo, b_hi) = [((sum(v) if total else statistics.median(v)), min(v), max(v)) for v in (ours, theirs)]
    paired = [x / y for x, y in zip(ours, theirs) if y] if len(ours) == len(theirs) else []
    return {"scenario": scenario, "measure": measure, "skillgraft_s": round(a, 4), "llama_server_s": round(b, 4),
            "ratio": round(a / b, 4) if b else None, "skillgraft_min": round(a_lo, 4), "skillgraft_max": round(a_hi, 4),
            "llama_server_min": round(b_lo, 4), "llama_server_max": round(b_hi, 4), "requests": len(ours),
            "paired_ratio": round(statistics.median(paired), 4) if paired else None}
