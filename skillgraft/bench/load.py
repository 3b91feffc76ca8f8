"""``skillgraft bench load``: N agents at once through ``skillgraft serve`` with K slots, against
plain llama-server with ``-np K`` and its defaults, the same model and binary.

Each agent (:mod:`.load_script`) has its own system prompt and tools and asks its turns one
after the other, streamed, as fast as they are answered; all N start together. Before the load
each agent asks once about its *seen* skill, one agent at a time (untimed), so the load mixes
skills seen and new. Every (model, K, N) starts each system afresh, and the systems run one
after the other, never at once (llama.cpp's threads spin: two model workloads at once time
neither). Both get the same threads (``SKILLGRAFT_THREADS``) and the same context per slot,
``n_ctx`` (the model's window, less where K of them would pass the largest context:
:func:`~.plain_server.slot_window`), each slot its own KV stream: llama-server divides ``-c``
across its ``-np K`` slots, so it gets ``-c K*n_ctx``; the gateway gets ``SKILLGRAFT_N_CTX=n_ctx``
and gives its server ``-c K*n_ctx`` itself.

Systems: ``skillgraft`` (one namespace); ``llama-server`` (``-m -np -c -t -tb -ngl`` and its
defaults otherwise: host prompt cache on, weights repacked, flash attention auto), each skill
pasted into the chat; where the model's chat template drops the ``tools`` parameter (the model
never sees them), also ``llama-server, tools pasted`` (the tools' text at the end of the system
prompt, as the gateway places them: the same work); with ``namespaces``, ``skillgraft, 2
namespaces`` (a key file of two teams, each stocked with the skills, agents alternating keys).
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional, Sequence

from ..core.progress import Progress
from .load_rows import compare, load_row, stream_chat
from .load_script import Agent, agents, chat, manuals
from .plain_server import PlainLlamaServer

__all__ = ["bench_load"]

MAX_TOKENS = 16
SETTLE_S = 4.0  # idle after the warm-up, on every system: the gateway keeps what it captured
REQUEST_TIMEOUT_S = 900.0
GATEWAY = "skillgraft"
TENANTS = "skillgraft, 2 namespaces"
LLAMA = "llama-server"
TOOLS_PASTED = "llama-server, tools pasted"
TEAMS = ("team-a", "team-b")


class LoadLlamaServer:
    """A :class:`~.plain_server.PlainLlamaServer` of ``slots`` slots as the load's system: each
    skill pasted, with ``tools_pasted`` the tools' text too."""

    paste = True

    def __init__(self, model: str, slots: int, workdir: Path, *, tools_pasted: bool = False) -> None:
        self.server = PlainLlamaServer(model, slots, workdir)
        self.name, self.model, self.tools_pasted = (TOOLS_PASTED if tools_pasted else LLAMA), None, tools_pasted
        self.client, self.build = self.server.client, self.server.build

    def client_for(self, agent: Agent):
        return self.server.new_client()

    def stop(self) -> None:
        self.server.stop()


class LoadGateway:
    """``skillgraft serve`` of one server of ``slots`` slots over a fresh store holding the skills;
    with ``namespaces``, a key file of two teams, each namespace stocked with the skills."""

    paste = tools_pasted = False

    def __init__(self, model: str, slots: int, workdir: Path, skills: dict, *, namespaces: bool = False) -> None:
        import httpx

        from .agent import _answer
        from .plain_server import slot_window
        from .serve import GatewayProcess

        self.name = TENANTS if namespaces else GATEWAY
        home = Path(tempfile.mkdtemp(prefix="store-", dir=workdir))
        args = ["--create", "--allow-deposits", "--deposits-per-minute", "600", "--slots", str(slots),
                "--slot-wait", "600", "--generation-timeout", "600", "--request-timeout", str(REQUEST_TIMEOUT_S)]
        self.keys = {team: secrets.token_hex(24) for team in TEAMS} if namespaces else {}
        if namespaces:
            key_file = home.parent / f"{home.name}.keys"
            key_file.write_text("".join(f"{team} {key}\n" for team, key in self.keys.items()))
            key_file.chmod(0o600)
            args += ["--keys", str(key_file), "--deposit-key", secrets.token_hex(24)]
        n_ctx = str(slot_window(model, slots))
        self.process = GatewayProcess(home, servers=1, model=model, log_path=workdir / f"{home.name}.log",
                                      extra_args=args, env={"SKILLGRAFT_N_CTX": n_ctx})
        self.url = self.process.url
        try:
            for key in self.keys.values() or [None]:
                with httpx.Client(base_url=self.url, timeout=REQUEST_TIMEOUT_S, trust_env=False,
                                  headers=self._headers(key)) as client:
                    self.model = _answer(client.get("/v1/models"), "the gateway")["data"][0]["id"]
                    for name, (text, examples) in skills.items():
                        _answer(client.post("/v1/skills", json={"kind": "manual", "name": name, "text": text,
                                                                "examples": examples}), "the gateway")
        except BaseException:
            self.process.stop()
            raise

    @staticmethod
    def _headers(key: Optional[str]) -> dict:
        return {"Authorization": f"Bearer {key}"} if key else {}

    def client_for(self, agent: Agent):
        import httpx

        key = self.keys[TEAMS[agent.index % len(TEAMS)]] if self.keys else None
        return httpx.Client(base_url=self.url, timeout=REQUEST_TIMEOUT_S, trust_env=False, headers=self._headers(key))

    def stop(self) -> None:
        self.process.stop()


def _body(system, agent: Agent, turns: list, skills: dict) -> dict:
    body = chat(agent, turns, paste=skills if system.paste else None, tools_pasted=system.tools_pasted)
    body.update(max_tokens=MAX_TOKENS, temperature=0)
    if system.model:
        body["model"] = system.model
    return body


def run_load(system, script: Sequence[Agent], skills: dict, progress=None,
             settle_s: float = SETTLE_S) -> tuple[list[dict], list[dict], float]:
    """The warm-up (each agent's seen skill, one agent at a time), ``settle_s`` idle, then every
    agent's turns at once. Returns (warm-up records, timed records, the load's wall seconds)."""
    warm, records, lock = [], [], threading.Lock()
    clients = [system.client_for(agent) for agent in script]
    try:
        for agent, client in zip(script, clients):
            warm.append({**stream_chat(client, _body(system, agent, [agent.warm_up], skills)), "agent": agent.index,
                         "turn": 0, "skill": agent.warm_up[0]})
            if progress:
                progress()
        time.sleep(settle_s)
        origin: list[float] = []
        barrier = threading.Barrier(len(script) + 1, action=lambda: origin.append(time.perf_counter()))

        def converse(agent: Agent, client) -> None:
            barrier.wait()
            for t, (skill, _) in enumerate(agent.turns):
                at = time.perf_counter() - origin[0]
                record = stream_chat(client, _body(system, agent, list(agent.turns[: t + 1]), skills))
                record.update(agent=agent.index, turn=t + 1, skill=skill, seen=skill == agent.warm_up[0],
                              at_s=round(at, 3))
                with lock:
                    records.append(record)
                if progress:
                    progress()

        threads = [threading.Thread(target=converse, args=pair, daemon=True) for pair in zip(script, clients)]
        for thread in threads:
            thread.start()
        barrier.wait()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - origin[0]
    finally:
        for client in clients:
            client.close()
    return warm, records, wall


def plan_sizes(slots: Sequence[int], agents_: Optional[Sequence[int]]) -> list[tuple[int, int]]:
    """(K, N) pairs: each K with the agent counts given, or K, 2K and 4K."""
    return [(k, n) for k in slots for n in (agents_ or (k, 2 * k, 4 * k))]


def _probe(model: str, workdir: Path) -> tuple[bool, str]:
    """Whether ``model``'s llama-server drops the ``tools`` parameter, and its build."""
    from .placement import drops_tools

    probe = LoadLlamaServer(model, 1, workdir)
    try:
        return drops_tools(probe), probe.build
    finally:
        probe.stop()


def bench_load(models: Sequence[str], slots: Sequence[int] = (1, 2), agents_: Optional[Sequence[int]] = None,
               turns: int = 3, namespaces: bool = False, quick: bool = False, progress: Progress = None) -> dict:
    """The load benchmark (module docstring). Returns ``{"rows", "comparisons", ...}``."""
    from ..config import engine_settings
    from .plain_server import slot_window

    started, load_before = time.perf_counter(), os.getloadavg()
    skills, sizes = manuals(quick), plan_sizes(slots, agents_)
    workdir = Path(tempfile.mkdtemp(prefix="skillgraft-bench-load-"))
    rows, comparisons, flags, builds, done, requests = [], [], {}, {}, [0], []
    dropped: dict = {}
    finished = False
    try:  # on a failure the folder stays, with the servers' logs
        for model in models:
            dropped[model], builds[model] = _probe(model, workdir)
            kinds = [GATEWAY, LLAMA] + [TOOLS_PASTED] * dropped[model] + [TENANTS] * namespaces
            total = len(models) * len(kinds) * sum(n * (1 + turns) for _, n in sizes)

            def tick() -> None:
                done[0] += 1
                if progress:
                    progress(done[0], total)

            for i, (k, n) in enumerate(sizes):
                script = agents(n, turns, quick=quick)
                order = kinds if i % 2 == 0 else [kinds[1], kinds[0], *kinds[2:]]  # who goes first alternates
                measured = {}
                for kind in order:
                    system = (LoadGateway(model, k, workdir, skills, namespaces=kind == TENANTS)
                              if kind in (GATEWAY, TENANTS) else
                              LoadLlamaServer(model, k, workdir, tools_pasted=kind == TOOLS_PASTED))
                    try:
                        warm, records, wall = run_load(system, script, skills, tick, 2.0 if quick else SETTLE_S)
                    finally:
                        system.stop()
                    if isinstance(system, LoadLlamaServer):  # its flags, the model by name, the port left out
                        flags[LLAMA] = ["-m", model, *system.server.flags]
                    labels = dict(model=model, system=kind, slots=k, agents=n, turns=turns)
                    measured[kind] = load_row(records, wall, **labels,
                                              warm_up_errors=sum(r["error"] is not None for r in warm))
                    requests += [{**labels, "warm_up": True, **r} for r in warm] + [{**labels, **r} for r in records]
                rows += [measured[kind] for kind in kinds]
                peer = measured[LLAMA]
                comparisons += [compare(measured[kind], peer) for kind in (GATEWAY, TENANTS) if kind in measured]
                if TOOLS_PASTED in measured:
                    comparisons.append(compare(measured[GATEWAY], measured[TOOLS_PASTED]))
        finished = True
    finally:
        if finished:
            shutil.rmtree(workdir, ignore_errors=True)
    settings = engine_settings()
    windows = {model: {str(k): slot_window(model, k) for k in slots} for model in models}
    return {"kind": "load", "models": list(models), "server_build": builds, "n_threads": settings.n_threads,
            "n_ctx_per_slot": windows, "max_tokens": MAX_TOKENS, "turns": turns, "quick": quick,
            "tools_dropped_by_llama_server": dropped, "llama_server_argv": flags.get(LLAMA, []),
            "rows": rows, "comparisons": comparisons, "requests": requests,
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "wall_s": round(time.perf_counter() - started, 2)}
