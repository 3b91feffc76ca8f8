"""The catalog routing benchmark behind ``skillgraft bench route --catalog FILE`` (or ``--skills``).

A catalog file holds one skill a line (JSONL: ``name``, ``description``, ``headings``,
``first_lines``; ``benchmarks/data/skill_catalog.jsonl`` is one, built from public collections):
each line becomes a skill folder whose ``SKILL.md`` has that frontmatter and a body of those
lines and headings. ``--skills`` takes real skill folders instead. They are imported into a
temporary store (the fake engine captures the KV: routing does not depend on it; the real
encoder embeds the keys), the abstain threshold is calibrated on the queries' ``calibrate``
half, and the ``test`` half is routed one query at a time: in-scope accuracy (the right skill,
not abstained), off-topic abstention, and each route's wall time beside one query encoding.

``scale`` grows the store to larger sizes with copies of the catalog's skills under varied names
(``NAME-copyK``) and times the same routes at each size. A copy's keys are its original's vectors
moved by a small random step (:class:`CopyingEncoder`), as the synthetic route benchmark does, so
thousands of skills need no more encoding than the catalog; queries are always encoded for real.
Nothing here reaches the network.
"""

from __future__ import annotations

import json
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from ..core.progress import Progress
from ..errors import InputError

__all__ = ["CopyingEncoder", "bench_route_catalog", "read_catalog", "read_route_queries", "write_skill_folders"]

MAX_CATALOG_BYTES = 64 << 20
MAX_CATALOG_SKILLS = 20_000
MAX_QUERIES = 10_000
FAKE_N_CTX = 16_384  # the fake engine's window to use, in bytes (its tokens are bytes): some 4,096 tokens of prose
MAX_SCALE_SKILLS = 20_000
COPY_STEP = 0.3  # the length of the random step a copy's key vector takes from its original's
_COPY_MARK = re.compile(r"[- ]copy[0-9]+\b")


class CopyingEncoder:
    """An encoder that encodes every text with ``encoder``, except a copy's (one with ``-copyK``
    in it): that gets its original's vector, remembered, moved by a seeded random step of length
    :data:`COPY_STEP`. It records itself as ``encoder`` does."""

    def __init__(self, encoder, seed: int = 0) -> None:
        self.encoder = encoder
        self.name = encoder.name
        self._seen: dict[str, np.ndarray] = {}
        self._rng = np.random.default_rng(seed)

    def __getattr__(self, name):
        return getattr(self.encoder, name)

    def encode(self, texts) -> np.ndarray:
        texts = list(texts)
        originals = [_COPY_MARK.sub("", t) for t in texts]
        copied = np.array([t != o for t, o in zip(texts, originals)], dtype=bool)
        # every text that is not a copy is encoded for real (a query above all), as is a copy's unseen original
        fresh = list(dict.fromkeys(o for o, c in zip(originals, copied) if not c or o not in self._seen))
        if fresh:
            self._seen.update(zip(fresh, np.asarray(self.encoder.encode(fresh), dtype=np.float32)))
        vectors = np.stack([self._seen[o] for o in originals]) if texts else np.zeros((0, 0), np.float32)
        if copied.any():
            step = self._rng.standard_normal((int(copied.sum()), vectors.shape[1])).astype(np.float32)
            step *= COPY_STEP / np.linalg.norm(step, axis=1, keepdims=True)
            moved = vectors[copied] + step
            vectors[copied] = moved / np.linalg.norm(moved, axis=1, keepdims=True)
        return vectors


def _bounded_json(path, what: str):
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_CATALOG_BYTES:
            raise InputError(f"the {what} {path} has {size} bytes (at most {MAX_CATALOG_BYTES})")
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the {what} {path}: {exc}") from None


def read_catalog(path, limit: Optional[int] = None) -> list[dict]:
    """The skills of a catalog file (JSONL), checked: each a name, a description, lists of
    headings and first lines (strings); the first ``limit`` of them."""
    rows = []
    for number, line in enumerate(_bounded_json(path, "catalog").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise InputError(f"catalog line {number} is not JSON: {exc}") from None
        ok = isinstance(row, dict) and all(isinstance(row.get(k), str) and row[k].strip() for k in ("name", "description"))
        ok = ok and all(isinstance(row.get(k, []), list) and all(isinstance(t, str) for t in row.get(k, []))
                        for k in ("headings", "first_lines"))
        if not ok:
            raise InputError(f"catalog line {number} needs a name and a description (strings) and lists of strings "
                             "as headings and first_lines")
        rows.append(row)
        if len(rows) > MAX_CATALOG_SKILLS:
            raise InputError(f"the catalog has more than {MAX_CATALOG_SKILLS} skills")
    if not rows:
        raise InputError(f"the catalog {path} holds no skill")
    return rows[:limit] if limit else rows


def read_route_queries(path) -> dict:
    """``{"in_scope": {"calibrate": [(query, skill)], "test": [...]}, "off_topic": {"calibrate": [query], "test": [...]}}``."""
    try:
        data = json.loads(_bounded_json(path, "query file"))
        parsed = {
            "in_scope": {half: [(str(q), str(s)) for q, s in data["in_scope"][half]] for half in ("calibrate", "test")},
            "off_topic": {half: [str(q) for q in data["off_topic"][half]] for half in ("calibrate", "test")},
        }
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"the query file {path} needs in_scope and off_topic, each with calibrate and test halves "
                         f"([query, skill] pairs; queries): {exc!r:.120}") from None
    if sum(len(v) for part in parsed.values() for v in part.values()) > MAX_QUERIES:
        raise InputError(f"the query file {path} has more than {MAX_QUERIES} queries")
    return parsed


def copied_rows(rows: list[dict], start: int, count: int) -> list[dict]:
    """``count`` copies of the catalog's ``rows``, the ``start``-th copy first, in turn: the
    k-th copy of a skill is named ``NAME-copyK``, the rest unchanged."""
    out = []
    for n in range(start, start + count):
        row = rows[n % len(rows)]
        out.append({**row, "name": f"{row['name']}-copy{n // len(rows) + 1}"})
    return out


def write_skill_folders(rows: list[dict], root: Path) -> None:
    """One folder a catalog skill under ``root``: frontmatter name and description, a body of
    its first lines and headings."""
    for number, row in enumerate(rows):
        folder = root / f"{number:05d}"
        folder.mkdir(parents=True)
        body = "\n\n".join([*row.get("first_lines", []), *row.get("headings", [])])
        text = f"---\nname: {json.dumps(row['name'])}\ndescription: {json.dumps(row['description'])}\n---\n\n{body}\n"
        (folder / "SKILL.md").write_text(text, encoding="utf-8")


def _tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _ms(values: list, q: float) -> float:
    return round(1000 * float(np.percentile(values, q)), 2)


def _timed_routes(memory, encoder, asked) -> dict:
    """Route each test request once (right in scope, abstained off topic); beside each, encode it
    once more and route it again (its vector kept: the route without the encoding), all timed
    in turn, so that the three see the same load."""
    encoder.encode(["warm-up"])
    memory.route("a warm-up request")
    route_s, encode_s, searched_s, right, abstained = [], [], [], 0, 0
    requests = [*asked["in_scope"]["test"], *((q, None) for q in asked["off_topic"]["test"])]
    for query, skill in requests:
        started = time.perf_counter()
        recall = memory.route(query)
        route_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        encoder.encode([query + " "])  # a text the router has not seen
        encode_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        memory.route(query)
        searched_s.append(time.perf_counter() - started)
        if skill is None:
            abstained += recall.decision == "abstain"
        else:
            right += recall.decision == "graft" and memory.skills.of_block(recall.block_id) == skill
    n_in, n_off = len(asked["in_scope"]["test"]), len(asked["off_topic"]["test"])
    return {
        "skills": len(memory.store.skill_names()),
        "in_scope_accuracy": round(right / n_in, 4) if n_in else None,
        "off_topic_abstained": round(abstained / n_off, 4) if n_off else None,
        "route_p50_ms": _ms(route_s, 50),
        "route_p95_ms": _ms(route_s, 95),
        "encode_p50_ms": _ms(encode_s, 50),
        "route_without_encoding_p50_ms": _ms(searched_s, 50),
        "route_without_encoding_p95_ms": _ms(searched_s, 95),
        "route_over_encode": round(statistics.median(route_s) / statistics.median(encode_s), 2),
    }


def bench_route_catalog(queries, engine, *, catalog=None, skills=None, limit: Optional[int] = None,
                        embedder: Optional[str] = None, scale: Sequence[int] = (), progress: Progress = None) -> dict:
    """Import a catalog (or skill folders) with ``engine`` (the fake one: routing does not
    depend on the KV), calibrate on the calibrate half, report the test half; then, for each
    size in ``scale`` (skills), the same routes over the catalog grown with copies of its
    skills (``rows[1:]``: their accuracy counts the copies, which share their originals' words,
    so only their times compare)."""
    from ..memory import SkillMemory
    from ..routing.encoders import make_embedder

    if (catalog is None) == (skills is None):
        raise InputError("give a catalog file or a folder of skills (one of them)")
    if scale and catalog is None:
        raise InputError("a scale test grows a catalog file: give --catalog")
    if any(size > MAX_SCALE_SKILLS for size in scale):
        raise InputError(f"a scale test goes up to {MAX_SCALE_SKILLS} skills")
    asked = read_route_queries(queries)
    encoder = make_embedder(embedder or "minilm")
    copying = CopyingEncoder(encoder)
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        source = skills
        rows = read_catalog(catalog, limit) if catalog is not None else []
        if catalog is not None:
            source = work / "skills"
            write_skill_folders(rows, source)
        home = work / "home"
        with SkillMemory(home, engine=engine, embedder=copying) as memory:
            started = time.perf_counter()
            report = memory.skills.import_folders(source, progress=progress)
            import_s = time.perf_counter() - started
            names = set(memory.store.skill_names())
            unknown = sorted({s for half in asked["in_scope"].values() for _, s in half} - names)
            if unknown:
                raise InputError(f"queries name skills the catalog does not hold: {unknown[:5]}")
            calibration = memory.calibrate(asked["in_scope"]["calibrate"], asked["off_topic"]["calibrate"])
            row = _timed_routes(memory, encoder, asked)
        stored = _tree_bytes(home)  # the store closed: its write-ahead log checkpointed
        row.update(import_s=round(import_s, 1), stored_bytes_per_skill=round(stored / max(1, len(names))))
        table = [row]
        for size in sorted(set(scale)):
            have = table[-1]["skills"]
            if size <= have:
                continue
            folder = work / f"copies-{size}"
            write_skill_folders(copied_rows(rows, have - len(rows), size - have), folder)
            with SkillMemory(home, engine=engine, embedder=copying) as memory:
                memory.skills.import_folders(folder, progress=progress)
                table.append(_timed_routes(memory, encoder, asked))
        return {
            "kind": "route-catalog", **row, "rows": table,
            "skipped": report.skipped[:20], "skipped_count": len(report.skipped),
            "embedder": encoder.name, "threshold": round(calibration.threshold, 4),
            "queries": {"in_scope": len(asked["in_scope"]["test"]), "off_topic": len(asked["off_topic"]["test"])},
            "machine": _machine(),
        }


def _machine() -> dict:
    from .runs import machine  # loads the model runtime: only when a benchmark reports

    return machine()
