"""``skillgraft bench serve``: the gateway under load from ``openai`` clients, optionally with a
llama-server killed (SIGKILL) mid-load.

A fresh store gets three manuals and one verified solution through the gateway's own skills
API; a reference answer for every question is taken one at a time before the load. Then
``clients`` threads each send ``requests`` chats (in-domain, the recurring verified question,
off-topic). Every answer is compared with its reference (greedy decoding is deterministic on
one slot per server): an answer that differs is *wrong*; a request that got no answer is
*lost* unless it got a clear retryable error (HTTP 503 or an error event), which is
counted apart. After the load the gateway is stopped and ``skillgraft check`` is run on the
store.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

from ..server.process import spawn_child

MAX_TOKENS = 24
START_TIMEOUT_S = 300.0

MANUALS = {
    "git-squash": (
        "Skill manual: squashing commits with git. Run git rebase -i HEAD~N, keep the first line as pick and change "
        "the others to squash. Push with git push --force-with-lease.",
        ["how do I squash my last commits?", "combine commits into one"],
    ),
    "sourdough": (
        "Skill manual: baking sourdough bread. Feed the starter, mix flour and water, rest, add salt, fold every "
        "half hour, shape, proof overnight in the fridge and bake covered at 250 C.",
        ["how do I bake sourdough bread?", "my loaf is too dense"],
    ),
    "tire-change": (
        "Skill manual: changing a flat tire. Loosen the lug nuts, jack the car up, remove the nuts and the wheel, "
        "mount the spare, tighten the nuts in a star pattern and lower the car.",
        ["how do I change a flat tire?", "put on the spare wheel"],
    ),
}
SOLUTION = {"kind": "solution", "question": "What is 17 * 23?", "answer": "391", "method": "print(17 * 23)"}
QUESTIONS = (
    ("How do I squash my last three commits with git?", "graft"),
    ("How long should sourdough proof in the fridge?", "graft"),
    ("What is 17 * 23?", "exact"),
    ("Who painted the Mona Lisa?", "abstain"),
)


@dataclass
class Outcome:
    question: str
    decision: Optional[str]
    seconds: float
    correct: Optional[bool]
    error: Optional[str] = None
    status: Optional[int] = None


class GatewayProcess:
    """``skillgraft serve`` in a subprocess on a free loopback port, stopped by its PID; ``env``
    adds variables to its environment."""

    def __init__(
        self, home: Path, *, servers: int, model: Optional[str], log_path: Path, extra_args: Sequence[str] = (),
        env: Optional[dict] = None,
    ) -> None:
        argv = [sys.executable, "-m", "skillgraft", "serve", "--home", str(home), "--port", "0", "--servers", str(servers)]
        if model:
            argv += ["--model", model]
        argv += list(extra_args)
        self._log = open(log_path, "wb")
        # a session of its own, and it stops when the process that started it dies
        self.process = spawn_child(argv, new_session=True, stdout=subprocess.PIPE, stderr=self._log,
                                   env={**os.environ, **env} if env else None)
        line = self._ready_line()
        self.url, self.server_pids = line["url"], line["servers"]

    def _ready_line(self) -> dict:
        result: dict = {}

        def read() -> None:
            raw = self.process.stdout.readline()
            if raw:
                result.update(json.loads(raw))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(START_TIMEOUT_S)
        if "url" not in result:
            self.stop()
            raise RuntimeError(f"the gateway did not start (exit {self.process.poll()}); see its log {self._log.name}")
        return result

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
        self.process.stdout.close()
        self._log.close()
        return self.process.returncode


def _percentile(values: list[float], q: float) -> Optional[float]:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))], 4)


def _stock(url: str) -> None:
    import httpx

    with httpx.Client(base_url=url, timeout=600, trust_env=False) as client:
        for name, (text, examples) in MANUALS.items():
            client.post("/v1/skills", json={"kind": "manual", "name": name, "text": text, "examples": examples}).raise_for_status()
        client.post("/v1/skills", json=SOLUTION).raise_for_status()


def capture_manuals(home: Path, model: Optional[str], slots: int, manuals: dict) -> None:
    """Capture ``manuals`` (name -> (text, examples)) as blocks into the store at ``home``, by a
    pool of one llama-server of ``slots`` slots, the layout a gateway serves them in: a gateway
    itself stores deposited manuals as text."""
    from ..gateway.pool import ServerPool
    from ..gateway.pooled_engine import PooledEngine
    from ..memory import SkillMemory

    with ServerPool(1, slots, model=model) as pool, SkillMemory(home, engine=PooledEngine(pool)) as memory:
        for name, (text, examples) in manuals.items():
            memory.add_manual(name, text, examples=examples)


def _ask(client, model: str, question: str) -> tuple[str, str]:
    response = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": question}], max_tokens=MAX_TOKENS, temperature=0
    )
    return response.choices[0].message.content, response.skillgraft["decision"]


def bench_serve(
    *, clients: int = 4, requests: int = 8, servers: int = 2, kill: bool = False, model: Optional[str] = None,
    progress: Optional[Callable[[int, int], None]] = None,
) -> dict:
    """Drive a fresh gateway; returns ``{"rows": [per decision], "summary": {...}}``."""
    import httpx
    import openai

    workdir = Path(tempfile.mkdtemp(prefix="skillgraft-bench-serve-"))
    home = workdir / "store"
    gateway = GatewayProcess(home, servers=servers, model=model, log_path=workdir / "gateway.log",
                             extra_args=["--allow-deposits", "--create"])  # a fresh store, stocked over HTTP
    outcomes: list[Outcome] = []
    killed_pid = None
    try:
        _stock(gateway.url)
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=600)
        served = client.models.list().data[0].id
        reference = {question: _ask(client, served, question) for question, _ in QUESTIONS}
        total = clients * requests
        done = threading.Semaphore(0)
        lock = threading.Lock()

        def worker(index: int) -> None:
            for n in range(requests):
                question = QUESTIONS[(index + n) % len(QUESTIONS)][0]
                started = time.perf_counter()
                try:
                    text, decision = _ask(client, served, question)
                    outcome = Outcome(question, decision, time.perf_counter() - started, (text, decision) == reference[question])
                except openai.APIStatusError as exc:
                    outcome = Outcome(question, None, time.perf_counter() - started, None, str(exc)[:200], exc.status_code)
                except openai.APIError as exc:
                    outcome = Outcome(question, None, time.perf_counter() - started, None, str(exc)[:200])
                with lock:
                    outcomes.append(outcome)
                    if progress:
                        progress(len(outcomes), total)
                done.release()

        started = time.perf_counter()
        threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(clients)]
        for thread in threads:
            thread.start()
        if kill:
            for _ in range(max(1, total // 3)):
                done.acquire()
            killed_pid = gateway.server_pids[0]
            os.kill(killed_pid, signal.SIGKILL)
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - started
        health = httpx.get(gateway.url + "/healthz", timeout=30, trust_env=False).json()
    finally:
        exit_code = gateway.stop()
    check = subprocess.run(
        [sys.executable, "-m", "skillgraft", "check", "--home", str(home), "--json"], capture_output=True, text=True
    )
    return _report(outcomes, wall, clients, requests, servers, killed_pid, health, exit_code, check, workdir)


def _report(outcomes, wall, clients, requests, servers, killed_pid, health, exit_code, check, workdir) -> dict:
    rows = []
    for decision in ("exact", "graft", "abstain"):
        latencies = [o.seconds for o in outcomes if o.decision == decision]
        rows.append({
            "decision": decision, "requests": len(latencies),
            "p50_s": _percentile(latencies, 0.5), "p95_s": _percentile(latencies, 0.95),
            "mean_s": round(statistics.fmean(latencies), 4) if latencies else None,
        })
    retryable = [o for o in outcomes if o.decision is None and o.status == 503]
    try:
        check_report = json.loads(check.stdout)
    except ValueError:
        check_report = {"ok": False, "raw": check.stdout[-500:] + check.stderr[-500:]}
    summary = {
        "clients": clients, "requests": len(outcomes), "servers": servers, "wall_s": round(wall, 3),
        "throughput_rps": round(len(outcomes) / wall, 3) if wall else None,
        "answered": sum(o.decision is not None for o in outcomes),
        "wrong": sum(o.correct is False for o in outcomes),
        "retryable_errors": len(retryable),
        "lost": sum(o.decision is None for o in outcomes) - len(retryable),
        "errors": sorted({o.error for o in outcomes if o.error}),
        "killed_server_pid": killed_pid,
        "server_restarts": health.get("restarts"),
        "healthy_after": health.get("status") == "ok",
        "gateway_exit_code": exit_code,
        "check_ok": bool(check_report.get("ok")),
        "workdir": str(workdir),
    }
    return {"kind": "serve", "rows": rows, "summary": summary}
