"""The growth benchmark behind ``skillgraft bench growth``: what a catalog costs as it grows.

At each size (100, 1,000 and 10,000 skills by default) a store holds that many skills: the real
catalog's skills first (``--catalog``, a JSONL file as ``bench route --catalog`` reads it, each
line written as a skill folder), then copies of them under other names (``NAME-copyK``) for the
sizes past it, and last a set of real skill folders (``--skills``) renamed for that size
(``NAME-at1000``), the probe. Copies are imported with :class:`~.route_catalog.CopyingEncoder`
(their keys are their originals' vectors moved a little, no encoding): they are there for cost.
The probe is imported with the real encoder, timed: the import rate into a catalog of that size;
then imported again, unchanged, timed: a re-import's cost. A fresh process then opens the store
(no model: routing needs none), routes every request of ``--queries`` (its four halves) a few
rounds (each round's requests marked with its number: texts the router has not seen, so each
route encodes its request) and reports the route times (p50, p99; the first route, which loads
the index, apart), its resident memory (VmHWM: the peak) and the store's bytes on disk. No
accuracy is reported: copies share their originals' words.
"""

from __future__ import annotations

import multiprocessing
import shutil
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from ..core.progress import Progress
from ..errors import InputError
from .route_catalog import CopyingEncoder, copied_rows, read_catalog, write_skill_folders

__all__ = ["DEFAULT_SIZES", "bench_growth"]

DEFAULT_SIZES = (100, 1_000, 10_000)
MAX_GROWTH_SKILLS = 20_000
ROUTE_ROUNDS = 3
NAME_LINE = "name:"


def bench_growth(skills, catalog, queries, engine, *, sizes: Sequence[int] = DEFAULT_SIZES, embedder: Optional[str] = None,
                 rounds: int = ROUTE_ROUNDS, progress: Progress = None) -> dict:
    """Grow a store through ``sizes`` (skills) and measure each: see the module's docstring.
    ``engine`` is the fake one: an import and a route run no model (it only sets the window)."""
    from ..routing.encoders import make_embedder

    probe = sorted(p.parent for p in Path(skills).glob("*/SKILL.md"))
    sizes = sorted(set(int(s) for s in sizes))
    if not probe:
        raise InputError(f"no skill folders (*/SKILL.md) under {skills}")
    if not sizes or sizes[0] <= len(probe) or sizes[-1] > MAX_GROWTH_SKILLS:
        raise InputError(f"sizes must lie between {len(probe) + 1} (the probe's skills and one more) and {MAX_GROWTH_SKILLS}")
    rows = read_catalog(catalog)
    requests = _requests(queries)
    encoder = make_embedder(embedder or "minilm")
    table = []
    with tempfile.TemporaryDirectory() as work:
        work, grown, probes = Path(work), 0, 0  # catalog skills held, probe skills held
        home = work / "home"
        for size in sizes:
            more = size - len(probe) - grown - probes
            if more > 0:
                _grow(home, work / f"grow-{size}", rows, grown, more, engine, encoder, progress)
                grown += more
            row = _probe(home, probe, work / f"probe-{size}", size, engine, encoder, progress)
            probes += len(probe)
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                row.update(pool.apply(route_in_a_fresh_process, (str(home), engine, requests, embedder or "minilm", rounds)))
            row.update(skills=grown + probes, disk_bytes=_tree_bytes(home))
            table.append(row)
    return {"kind": "growth", "rows": table, "per_1000": _per_1000(table), "probe": [p.name for p in probe],
            "catalog_skills": len(rows), "requests": len(requests), "rounds": rounds, "embedder": encoder.name,
            "route_p50_ratio": round(table[-1]["route_p50_ms"] / table[0]["route_p50_ms"], 2), "machine": _machine()}


def _tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _requests(queries) -> list[str]:
    from .route_catalog import read_route_queries

    asked = read_route_queries(queries)
    return [q for half in asked["in_scope"].values() for q, _ in half] + \
        [q for half in asked["off_topic"].values() for q in half]


def _memory(home: Path, engine, encoder):
    from ..memory import SkillMemory

    return SkillMemory(home, engine=engine, embedder=encoder)


def _grow(home: Path, folder: Path, rows: list, held: int, count: int, engine, encoder, progress: Progress) -> None:
    """``count`` more catalog skills: the real ones not yet held, then copies."""
    real = rows[held:held + count]
    extra = copied_rows(rows, max(held - len(rows), 0), count - len(real))
    write_skill_folders(real + extra, folder)
    with _memory(home, engine, CopyingEncoder(encoder)) as memory:
        memory.skills.import_folders(folder, progress=progress)
    shutil.rmtree(folder)


def _probe(home: Path, probe: list, folder: Path, size: int, engine, encoder, progress: Progress) -> dict:
    """Import the probe skills renamed for ``size`` (timed), then again unchanged (timed)."""
    for source in probe:
        target = folder / f"{source.name}-at{size}"
        shutil.copytree(source, target, symlinks=True)
        skill_md = target / "SKILL.md"
        lines = skill_md.read_text(encoding="utf-8").split("\n")
        at = next(i for i, line in enumerate(lines) if line.startswith(NAME_LINE))
        lines[at] = f"{lines[at]}-at{size}"
        skill_md.write_text("\n".join(lines), encoding="utf-8")
    with _memory(home, engine, encoder) as memory:
        memory.route("a warm-up request")  # the encoder loaded and the index built: not the import's
        started = time.perf_counter()
        report = memory.skills.import_folders(folder, progress=progress)
        first = time.perf_counter() - started
        started = time.perf_counter()
        again = memory.skills.import_folders(folder)
        second = time.perf_counter() - started
    if report.skipped or len(report.imported) != len(probe) or len(again.unchanged) != len(probe):
        raise InputError(f"the probe skills did not import cleanly: {report.skipped[:3]}")
    return {"import_s_per_skill": round(first / len(probe), 4), "reimport_s_per_skill": round(second / len(probe), 4),
            "probe_parts": sum(len(item.blocks) for item in report.imported)}


def route_in_a_fresh_process(home: str, engine, requests: list, embedder: str, rounds: int) -> dict:
    """Open the store at ``home`` in this (fresh) process, route ``requests`` ``rounds`` times;
    the route times, the first route's apart, and the peak resident memory."""
    from ..routing.encoders import make_embedder

    with _memory(Path(home), engine, make_embedder(embedder)) as memory:
        started = time.perf_counter()
        memory.route("a warm-up request")
        first = time.perf_counter() - started
        times = []
        for round_ in range(rounds):  # each round's texts new to the router (it keeps recent queries' vectors)
            for request in requests:
                text = f"{request} ({round_})" if round_ else request
                started = time.perf_counter()
                memory.route(text)
                times.append(time.perf_counter() - started)
        keys = len(memory.store.routing_keys())
    return {"first_route_s": round(first, 3), "route_p50_ms": round(1000 * float(np.percentile(times, 50)), 2),
            "route_p99_ms": round(1000 * float(np.percentile(times, 99)), 2), "routes": len(times),
            "keys": keys, "peak_rss_bytes": _peak_rss()}


def _peak_rss() -> Optional[int]:
    """This process's peak resident memory (VmHWM), in bytes; None where /proc does not say."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _per_1000(table: list) -> dict:
    """Memory and disk a thousand more skills take: the slope between the two largest sizes."""
    if len(table) < 2:
        return {}
    low, high = table[-2], table[-1]
    span = (high["skills"] - low["skills"]) / 1000
    memory = None if None in (high["peak_rss_bytes"], low["peak_rss_bytes"]) else \
        round((high["peak_rss_bytes"] - low["peak_rss_bytes"]) / span)
    return {"between": [low["skills"], high["skills"]], "memory_bytes": memory,
            "disk_bytes": round((high["disk_bytes"] - low["disk_bytes"]) / span)}


def _machine() -> dict:
    from .runs import machine

    return machine()

