"""``skillgraft bench agent --skills DIR --queries FILE``: the agent benchmark over real skill folders.

The agent of :mod:`.agent` (its system prompt with its tools) asks one question per skill of the
folders under ``DIR`` (the skill's first in-scope request in a routing query file of ``[text,
skill]`` pairs, as ``benchmarks/data/anthropic_skills_queries.json``), the same questions in three
rounds, with a restart of both systems before rounds 2 and 3.

- ``skillgraft``: ``skillgraft serve`` over a store the folders were imported into (text first: no
  KV until a part is used), the agent's prompt and question; the gateway places the routed part
  after the app's prompt and makes its cells on first use.
- ``llama-server``: its prompt cache on (``--cache-ram``), the same part pasted as a second system
  message: the part the memory routes the question to, found before any timing, so both systems
  evaluate the same tokens. A question the memory abstains on is left out of both (counted).

Rows: round 1 (each part's first sighting), the first request after each restart, and rounds 2-3
(after a restart); the same pinned flags. The systems take turns question by question, the one
going first alternating (:func:`~.agent_rows.take_turns`), so a machine whose speed drifts during
the run weighs on both alike (here the same 1,725-token prefill took 17.7 to 25.4 CPU-seconds
within minutes); each gateway question is followed by ``SETTLE_S`` idle seconds, the gap of an
agent's user between questions, in which the gateway keeps what it captured off the answer's
path — never while the peer is timed.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator, Optional, Union

from ..core.progress import Progress
from ..errors import InputError
from .agent import RESTART_TARGET, SETTLE_S, GatewaySystem, LlamaServerSystem, _add_stages, _user
from .agent_rows import recorder, request_row, take_turns
from .agent_texts import Texts

__all__ = ["bench_agent_skills"]

ROUNDS = 3


def _questions(query_file: Union[str, Path]) -> dict[str, list[str]]:
    """Each skill's in-scope requests of ``query_file``, in file order (calibrate half first)."""
    try:
        data = json.loads(Path(query_file).read_text(encoding="utf-8"))
        halves = data["in_scope"]
        pairs = [pair for half in ("calibrate", "test") for pair in halves.get(half, [])]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise InputError(f"{query_file} is no query file with in_scope calibrate/test halves: {exc}") from None
    questions: dict[str, list[str]] = {}
    for pair in pairs:
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise InputError(f"{query_file}: an in-scope request is [text, skill], got {pair!r}")
        questions.setdefault(pair[1], []).append(pair[0])
    if not questions:
        raise InputError(f"{query_file} holds no in-scope request")
    return questions


def _stock(home: Path, model: str, skills: Path, questions: dict[str, list[str]], limit: Optional[int]) -> tuple:
    """Import ``skills`` into ``home`` (text first) and route each skill's question once: ``(plan,
    parts, setup)`` with plan ``{skill: (question, part name)}`` of the routed questions,
    parts ``{part name: (its text, [])}`` and what was imported and left out."""
    from ..memory import SkillMemory

    started = time.perf_counter()
    with SkillMemory.open(home, model=model) as memory:
        report = memory.skills.import_folders([str(skills)])
        imported_s = time.perf_counter() - started
        plan: dict[str, tuple[str, str]] = {}
        parts: dict[str, tuple[str, list]] = {}
        abstained, elsewhere = [], []
        for skill in sorted(questions)[:limit]:
            question = questions[skill][0]
            recall = memory.route(question)
            if recall.decision != "graft" or recall.block is None:
                abstained.append(question)
                continue
            if memory.skills.of_block(recall.block.id) != skill:
                elsewhere.append(question)
            plan[skill] = (question, recall.block.name)
            parts[recall.block.name] = (recall.block.source, [])
    setup = {"imported": len(report.imported), "skipped": len(report.skipped), "import_s": round(imported_s, 2),
             "abstained": abstained, "routed_elsewhere": elsewhere}
    return plan, parts, setup


def _segments(system, agent: str, plan: dict, record: Callable[[dict], None]) -> Iterator[str]:
    """Three rounds of one question per skill, ``system`` restarted before rounds 2 and 3; a
    segment is one question."""
    for round_ in range(1, ROUNDS + 1):
        if round_ > 1:
            system.restart()
        for i, (skill, (question, part)) in enumerate(plan.items()):
            result = system.ask(agent, [_user(question)], part)
            scenario = "after a restart" if round_ > 1 and i == 0 else f"round {round_}"
            record({"system": system.name, "scenario": scenario, "round": round_, "skill": skill, "expected": part,
                    "question": question, **result})
            yield f"round {round_}: {skill}"


def bench_agent_skills(skills: Union[str, Path], query_file: Union[str, Path], model: Optional[str] = None,
                       progress: Progress = None, peer_cache_mib: Optional[int] = None, limit: Optional[int] = None) -> dict:
    """Time to first token of the agent over real skills, skillgraft against llama-server (module
    docstring); ``limit``: the first N skills (by name) of the query file only."""
    from ..config import default_model
    from ..engine.models import settings_for

    model = model or default_model()
    skills = Path(skills)
    if not skills.is_dir():
        raise InputError(f"{skills} is no folder of skills")
    texts = Texts(False)
    started = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="skillgraft-bench-skills-"))
    done = False
    try:
        plan, parts, setup = _stock(workdir / "store-1-slots", model, skills, _questions(query_file), limit)
        if not plan:
            raise InputError("the memory routed none of the questions: nothing to time")
        records, record = recorder(2 * ROUNDS * len(plan), progress)
        gateway = GatewaySystem(workdir, model, {})
        try:
            server = LlamaServerSystem(model, parts, cache_mib=peer_cache_mib)
            try:
                take_turns([(_segments(gateway, texts.agent, plan, record), SETTLE_S),
                            (_segments(server, texts.agent, plan, record), 0.0)])
            finally:
                server.stop()
        finally:
            gateway.stop()
        _add_stages([row for row in records if row["system"] == gateway.name], gateway.stages())
        done = True
    finally:
        if done:
            shutil.rmtree(workdir, ignore_errors=True)
    settings = settings_for(model)
    rows = _rows(records)
    return {"kind": "agent-skills", "model": model, "skills": len(plan), "peer_cache_mib": peer_cache_mib,
            "n_threads": settings.n_threads, "n_ctx": settings.n_ctx, "rows": rows, "summary": _summary(rows),
            "decisions": _decisions(records), "setup": setup, "requests": records,
            "wall_s": round(time.perf_counter() - started, 2)}


def _rows(records: list[dict]) -> list[dict]:
    def times(system: str, keep) -> list[float]:
        return [r["seconds"] for r in records if r["system"] == system and keep(r)]

    def row(measure: str, keep, *, total: bool = False) -> dict:
        return request_row("real skills", measure, times("skillgraft", keep), times("llama-server", keep), total=total)

    return [row("round 1 (first sighting)", lambda r: r["round"] == 1),
            row("first request after a restart", lambda r: r["scenario"] == "after a restart"),
            row("rounds 2-3 after a restart", lambda r: r["round"] > 1),
            row("rounds 2-3, after the first request", lambda r: r["round"] > 1 and r["scenario"] != "after a restart"),
            row("all requests, total", lambda r: True, total=True)]


def _summary(rows: list[dict]) -> dict:
    restart = next(r for r in rows if r["measure"] == "first request after a restart")
    return {"restart_speedup": round(restart["llama_server_s"] / restart["skillgraft_s"], 2),
            "restart_target": RESTART_TARGET, "first_sighting_ratio": rows[0]["ratio"]}


def _decisions(records: list[dict]) -> dict:
    """How many of the gateway's answers grafted the part routed before the timing (the part the
    peer was given)."""
    ours = [r for r in records if r["system"] == "skillgraft"]
    other = [{k: r[k] for k in ("round", "question", "decision", "block", "expected")}
             for r in ours if r["decision"] != "graft" or r["block"] != r["expected"]]
    return {"requests": len(ours), "graft_on_expected": len(ours) - len(other), "mismatches": other}
