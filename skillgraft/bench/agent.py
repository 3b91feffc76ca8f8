"""``skillgraft bench agent``: time to first token of agent requests, skillgraft against llama-server.

Both systems run the same model and llama-server binary, one slot, the same context and threads,
one token per request (``max_tokens`` 1, so a request's time is its prefill), greedy, one
request at a time. Both are up throughout and take turns, segment by segment (a scenario, or one
round or restart of it), the one going first alternating, so a machine that drifts slower or
faster during the run weighs on both alike; after its turn the gateway is left idle
:data:`SETTLE_S` seconds, so its idle work (saving the prefix states still pending on its slot)
never runs beside the other's timed requests. Within a segment requests go back to back.

- ``skillgraft``: ``skillgraft serve`` over a fresh store holding the manuals. The app sends its
  system prompt and chat; the gateway grafts the routed manual in front of them and continues
  what the slot, a derived prefix state or the block already holds.
- ``llama-server``: the binary alone as users run it, its own defaults otherwise
  (:mod:`.plain_server`: host prompt cache on, flash attention ``auto``): the slot keeps the
  longest common prefix of the last prompt. The routed manual is pasted as a second system
  message after the app's system prompt (retrieval-augmented prompting), so the app's prefix
  stays at the front of the slot.

Scenarios, in this order on each system: ``agent`` (one app, six questions on one manual, then
twelve more of the same app's questions for a steadier median),
``restart`` (the gateway restarted on the same home, llama-server restarted; then a new question,
``repeats`` times), ``six skills`` (six manuals, one question each, three rounds),
``conversation`` (eight turns, fixed assistant replies), ``three apps`` (three system prompts
round robin, three rounds, one slot; with ``two_slots`` again on one server of two slots).
The gateway's own stage timings (routing, answer) are read back from each store's ledger.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Callable, Iterator, Optional

from . import agent_data as data
from .agent_texts import Texts
from ..core.progress import Progress
from .agent_rows import compared_row, recorder, seconds, take_turns
from .serve import capture_manuals

MAX_TOKENS = 1
ROUNDS = 3
REQUEST_TIMEOUT_S = 600.0
AGENT_MANUAL = "tide-rollback"
RESTART_TARGET = 20.0
SETTLE_S = 4.0  # > IDLE_CAPTURE_S + the pool's supervision period + one save (2 s with --quick)

CONVERSATION = (  # "conversation": (user turn, the fixed assistant reply after it); all route to tide-rollback
    ("Checkout started failing right after this morning's release. How do I roll it back?",
     "First find the last good release: run tide releases checkout --env production --limit 5 and take the newest "
     "release with canary passed before the broken one. Then roll back eu-west alone and watch it."),
    ("The releases list shows r2024.11.04-3 as the broken one and r2024.11.04-2 with canary passed. Do I roll back to "
     "r2024.11.04-2?",
     "Yes. Run tide rollback checkout --to r2024.11.04-2 --region eu-west. It waits for the new replicas and prints "
     "rollback complete. Shall I check the service status first?"),
    ("Yes, check it. Which region should the rollback start with?",
     "Start with eu-west, the primary region: it carries most of the traffic, so you see at once whether the rollback "
     "helps. us-east and ap-south follow once eu-west is healthy."),
    ("The rollback in eu-west printed rollback complete. What should I watch now?",
     "Watch it for five minutes with tide status checkout --region eu-west --watch. The error rate must fall below "
     "1 %; if it does not, the release was not the cause and we should look at the dependencies."),
    ("The error rate is down to 0.4 % in eu-west. How do I roll back the release in us-east and ap-south?",
     "Run tide rollback checkout --to r2024.11.04-2 --region us-east, wait for rollback complete, then the same "
     "command with --region ap-south. Watch each region as you did for eu-west."),
    ("Both regions are rolled back. Do I need to freeze deploys after the rollback?",
     "Yes: tide freeze checkout --reason \"<incident id>\" keeps anyone from shipping the broken commit again until "
     "the fix is merged. Use the incident id so the freeze explains itself."),
    ("The broken release ran a migration. Does rolling back the release also revert it?",
     "No. A rollback never reverts database migrations. Keep the freeze and ask the owning team before rolling back "
     "any further; the old release must work with the migrated schema."),
    ("The fix is merged now. How do I unfreeze the service after the rollback?", ""),
)


def _user(text: str) -> dict:
    return {"role": "user", "content": text}


def _answer(response, who: str) -> dict:
    if not response.is_success:
        raise RuntimeError(f"{who} answered {response.status_code}: {response.text[:300]}")
    return response.json()


class GatewaySystem:
    """``skillgraft serve`` in a subprocess (one server of ``slots`` slots) over a fresh store
    holding ``manuals``, and its HTTP client."""

    name = "skillgraft"

    def __init__(self, workdir: Path, model: Optional[str], manuals: dict, slots: int = 1, captured: bool = False,
                 settle: Optional[Callable] = None) -> None:
        self.workdir, self.model_arg, self.manuals, self.captured, self.settle = workdir, model, manuals, captured, settle
        self.starts: list[float] = []
        self.stocked: list[float] = []
        self.exit_codes: list[int] = []
        self.homes: list[Path] = []
        self._open(slots, manuals)

    def _open(self, slots: int, manuals: dict) -> None:
        self.slots, self.home = slots, self.workdir / f"store-{slots}-slots"
        self.homes.append(self.home)
        if self.settle is not None:  # the store's settings, before the gateway reads them
            from ..store import BlockStore

            store = BlockStore(self.home)
            try:
                self.settle(store)
            finally:
                store.close()
        started = time.perf_counter()
        if self.captured:  # blocks leading the chat, captured by a pool of the gateway's slot layout
            capture_manuals(self.home, self.model_arg, slots, manuals)
        self._start()
        try:
            for name, (text, examples) in ({} if self.captured else manuals).items():  # or text, made on first use
                _answer(self.client.post("/v1/skills", json={"kind": "manual", "name": name, "text": text,
                                                             "examples": examples}), "the gateway")
        except BaseException:
            self.stop()
            raise
        self.stocked.append(time.perf_counter() - started - self.starts[-1])

    def _start(self) -> None:
        import httpx

        from .plain_server import slot_window
        from .serve import GatewayProcess

        started = time.perf_counter()
        self.process = GatewayProcess(  # each slot the window of llama-server's (PlainLlamaServer)
            self.home, servers=1, model=self.model_arg, log_path=self.workdir / f"gateway-{len(self.starts)}.log",
            extra_args=["--create", "--allow-deposits", "--deposits-per-minute", "600", "--slots", str(self.slots)],
            env={"SKILLGRAFT_N_CTX": str(slot_window(self.model_arg, self.slots))},
        )
        self.client = httpx.Client(base_url=self.process.url, timeout=REQUEST_TIMEOUT_S, trust_env=False)
        self.model = _answer(self.client.get("/v1/models"), "the gateway")["data"][0]["id"]
        self.starts.append(time.perf_counter() - started)

    def ask(self, system: str, turns: list, manual: str) -> dict:
        body = {"model": self.model, "messages": [{"role": "system", "content": system}, *turns],
                "max_tokens": MAX_TOKENS, "temperature": 0}
        started = time.perf_counter()
        response = self.client.post("/v1/chat/completions", json=body)
        seconds = time.perf_counter() - started
        reply = _answer(response, "the gateway")
        note = reply["skillgraft"]
        return {"seconds": seconds, "prompt_tokens": reply["usage"]["prompt_tokens"], "cache_n": note["cache_n"],
                "reused_from": note["reused_from"], "decision": note["decision"], "block": note.get("block_name") or ""}

    def restart(self) -> None:
        self.stop()
        self._start()

    def reopen(self, slots: int, manuals: dict) -> None:
        """Another gateway with ``slots`` slots, over a store of its own holding ``manuals``:
        blocks graft only into the slot layout they were captured under (it is in the fingerprint)."""
        self.stop()
        self._open(slots, manuals)

    def stop(self) -> None:
        self.client.close()
        self.exit_codes.append(self.process.stop())

    def stages(self) -> list[dict]:
        """The timings the gateway recorded for each answer, oldest first, over every store used."""
        from ..store.block_store import BlockStore

        stages: list[dict] = []
        for home in self.homes:
            store = BlockStore(home)
            try:
                stages += [row.timings for row in reversed(store.ledger_rows(event="generate", limit=100_000))]
            finally:
                store.close()
        return stages


class LlamaServerSystem:
    """Plain llama-server as users run it (:class:`~.plain_server.PlainLlamaServer`: its own
    defaults), asked over its OpenAI-style chat API, the manual pasted after the app's prompt;
    ``cache_mib`` sets its host prompt cache (``None``: its default, 8192 MiB; 0 turns it off)."""

    name = "llama-server"

    def __init__(self, model: str, manuals: dict, slots: int = 1, cache_mib: Optional[int] = None) -> None:
        self.model, self.manuals, self.cache_mib = model, manuals, cache_mib
        self.workdir = Path(tempfile.mkdtemp(prefix="skillgraft-llama-server-"))
        self.starts: list[float] = []
        self._open(slots)

    def _open(self, slots: int) -> None:
        from .plain_server import PlainLlamaServer

        started = time.perf_counter()
        self.server = PlainLlamaServer(self.model, slots, self.workdir, cache_mib=self.cache_mib)
        self.starts.append(time.perf_counter() - started)

    @property
    def client(self):
        return self.server.client

    def count_tokens(self, text: str) -> int:
        """The tokens of ``text`` by the model's own tokenizer, no template or special tokens."""
        reply = _answer(self.client.post("/tokenize", json={"content": text, "add_special": False,
                                                            "parse_special": False}), "llama-server")
        return len(reply["tokens"])

    def ask(self, system: str, turns: list, manual: str) -> dict:
        messages = [{"role": "system", "content": system}, {"role": "system", "content": self.manuals[manual][0]}, *turns]
        body = {"messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0, "cache_prompt": True}
        started = time.perf_counter()
        response = self.client.post("/v1/chat/completions", json=body)
        seconds = time.perf_counter() - started
        reply = _answer(response, "llama-server")
        cache_n = int((reply.get("timings") or {}).get("cache_n", 0))
        return {"seconds": seconds, "prompt_tokens": reply["usage"]["prompt_tokens"], "cache_n": cache_n,
                "reused_from": "slot" if cache_n else "", "decision": "pasted", "block": manual}

    def restart(self) -> None:
        started = time.perf_counter()
        self.server.restart()
        self.starts.append(time.perf_counter() - started)

    def reopen(self, slots: int, manuals: dict) -> None:
        self.server.stop()
        self._open(slots)

    def stop(self) -> None:
        self.server.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _scenarios(system, texts: Texts, repeats: int, record: Callable[[dict], None], two_slots: bool) -> Iterator[str]:
    """Every scenario on ``system``, in order; each request's result goes to ``record``. Yields
    the name of each segment (a scenario, or one round or restart of it) once it is done."""

    def ask(scenario: str, round_: int, prompt: str, turns: list, manual: str) -> None:
        result = system.ask(prompt, turns, manual)
        record({"system": system.name, "scenario": scenario, "round": round_, "expected": manual,
                "question": turns[-1]["content"], **result})

    for i, question in enumerate(texts.agent_questions):
        ask("agent", i + 1, texts.agent, [_user(question)], AGENT_MANUAL)
    yield "agent"
    for i in range(repeats):
        system.restart()
        ask("restart", i + 1, texts.agent, [_user(data.RESTART_QUESTIONS[i % len(data.RESTART_QUESTIONS)])], AGENT_MANUAL)
        yield f"restart {i + 1}"
    for r in range(ROUNDS):
        for name in data.SKILL_QUESTIONS:
            ask("six skills", r + 1, texts.agent, [_user(data.SKILL_QUESTIONS[name][r])], name)
        yield f"six skills, round {r + 1}"
    turns: list = []
    for i, (question, reply) in enumerate(CONVERSATION):
        turns.append(_user(question))
        ask("conversation", i + 1, texts.agent, list(turns), AGENT_MANUAL)
        turns.append({"role": "assistant", "content": reply})
    yield "conversation"
    for slots, scenario in ((1, "three apps"), (2, "three apps, 2 slots"))[: 1 + two_slots]:
        if slots > 1:
            system.reopen(slots, {manual: texts.manuals[manual] for _, manual, _ in texts.apps})
        for r in range(ROUNDS):
            for prompt, manual, questions in texts.apps:
                ask(scenario, r + 1, prompt, [_user(questions[r])], manual)
            yield f"{scenario}, round {r + 1}"


def requests_per_system(repeats: int, two_slots: bool = False, quick: bool = False) -> int:
    """How many timed requests each system gets."""
    return (len(Texts(quick).agent_questions) + repeats + ROUNDS * len(data.SKILL_QUESTIONS) + len(CONVERSATION)
            + (1 + two_slots) * ROUNDS * len(data.APPS))


def bench_agent(model: Optional[str] = None, repeats: int = 3, progress: Progress = None, quick: bool = False,
                two_slots: bool = False, peer_cache_mib: Optional[int] = None, captured: bool = False) -> dict:
    """Time to first token per request, skillgraft against llama-server (module docstring);
    ``repeats`` restarts are measured (median kept); ``quick``: the first lines of each text and
    one restart; ``two_slots``: three apps again on two slots; ``captured``: the manuals captured
    as blocks when stocked (leading the chat), not stored as text (placed after the app's system
    prompt, their cells made on first use). Returns ``{"rows": [per scenario and measure],
    "summary", "decisions", "requests", ...}``."""
    from ..config import default_model
    from ..engine.models import settings_for

    model = model or default_model()
    repeats = 1 if quick else repeats
    texts = Texts(quick)
    records, record = recorder(2 * requests_per_system(repeats, two_slots, quick), progress)
    started = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="skillgraft-bench-agent-"))
    setup: dict = {}
    done = False
    try:  # on a failure the folder stays, with the gateway's logs
        gateway = GatewaySystem(workdir, model, texts.manuals, captured=captured, settle=texts.settle_threshold)
        try:
            server = LlamaServerSystem(model, texts.manuals, cache_mib=peer_cache_mib)
            try:
                take_turns([(_scenarios(gateway, texts, repeats, record, two_slots), 2.0 if quick else SETTLE_S),
                            (_scenarios(server, texts, repeats, record, two_slots), 0.0)])
                sizes = _sizes(server.count_tokens, texts)
                build, peer_flags = server.server.build, server.server.flags
            finally:
                server.stop()
        finally:
            gateway.stop()
        _add_stages([row for row in records if row["system"] == gateway.name], gateway.stages())
        setup["gateway_start_s"] = [round(s, 3) for s in gateway.starts]
        setup["stock_s"] = [round(s, 3) for s in gateway.stocked]
        setup["gateway_exit_codes"] = gateway.exit_codes
        setup["llama_server_start_s"] = [round(s, 3) for s in server.starts]
        done = True
    finally:
        if done:
            shutil.rmtree(workdir, ignore_errors=True)
    settings = settings_for(model)
    report = _report(records, repeats)
    report.update(kind="agent", model=model, quick=quick, repeats=repeats, two_slots=two_slots, server_build=build,
                  peer_cache_mib=peer_cache_mib, llama_server_flags=peer_flags, captured=captured,
                  n_threads=settings.n_threads, n_ctx=settings.n_ctx, max_tokens=MAX_TOKENS, prompt_tokens=sizes,
                  setup=setup, wall_s=round(time.perf_counter() - started, 2), requests=records, layout={
                      "skillgraft": ("the app's system prompt and chat; the gateway grafts the routed manual in front"
                                     if captured else "the app's system prompt, the routed manual as a second system "
                                     "turn (its cells made on first use, then restored), the chat"),
                      "llama-server": "the app's system prompt, the routed manual as a second system message, the chat",
                  })
    return report


def _add_stages(records: list[dict], stages: list[dict]) -> None:
    """Give each gateway request its routing and answer seconds, as the gateway recorded them."""
    if len(stages) != len(records):
        return  # not one answer per request: leave them out rather than pair them wrongly
    for row, timings in zip(records, stages):
        row["gateway_recall_s"], row["gateway_total_s"] = timings.get("recall_s"), timings.get("total_s")


def _sizes(count: Callable[[str], int], texts: Texts) -> dict:
    """The token counts of the texts (``count``: the model's own tokenizer, no template)."""
    return {"agent": count(texts.agent), "apps": [count(prompt) for prompt, _, _ in texts.apps],
            "manuals": {name: count(text) for name, (text, _) in texts.manuals.items()}}


def _median(records: list[dict], scenario: str, key: str, rounds=None) -> Optional[float]:
    values = [r[key] for r in records if r["scenario"] == scenario and (rounds is None or r["round"] in rounds)
              and isinstance(r.get(key), (int, float))]
    return round(statistics.median(values), 4) if values else None


def _report(records: list[dict], repeats: int) -> dict:
    times, row = partial(seconds, records), partial(compared_row, records, "llama-server")

    later = range(2, len(data.AGENT_QUESTIONS) + 1)
    more = range(2, 1 + max((r["round"] for r in records if r["scenario"] == "agent"), default=1))
    rows = [row("agent", "first request", {1}), row("agent", "later requests", later),
            row("agent", f"later requests, rounds 2-{more.stop - 1}", more),
            row("restart", "first request after a restart")]
    rows += [row("six skills", f"round {r}", {r}) for r in range(1, ROUNDS + 1)]
    rows += [row("conversation", f"{len(CONVERSATION)} turns, total", total=True),
             row("conversation", "per turn")]
    apps = [name for name in ("three apps", "three apps, 2 slots") if any(r["scenario"] == name for r in records)]
    for scenario in apps:
        rows += [row(scenario, f"round {r}", {r}) for r in range(1, ROUNDS + 1)]
        rows.append(row(scenario, "rounds 2-3", {2, 3}))
    ours = [r for r in records if r["system"] == "skillgraft"]
    wrong = [{k: r[k] for k in ("scenario", "round", "question", "decision", "block", "expected")}
             for r in ours if r["decision"] != "graft" or r["block"] != r["expected"]]
    reuse: dict = {}
    for r in ours:
        counts = reuse.setdefault(r["scenario"], {})
        counts[r["reused_from"] or "none"] = counts.get(r["reused_from"] or "none", 0) + 1
    restart = statistics.median(times("skillgraft", "restart"))
    cold_same = statistics.median(times("llama-server", "restart"))
    cold_first = times("llama-server", "agent", {1})[0]
    by = {(r["scenario"], r["measure"]): r for r in rows}
    summary = {
        "agent_later_ratio": by["agent", "later requests"]["ratio"],
        "agent_later_all_ratio": by["agent", f"later requests, rounds 2-{more.stop - 1}"]["ratio"],
        "six_skills_round_2_ratio": by["six skills", "round 2"]["ratio"],
        "six_skills_round_3_ratio": by["six skills", f"round {ROUNDS}"]["ratio"],
        "conversation_total_ratio": by["conversation", f"{len(CONVERSATION)} turns, total"]["ratio"],
        "three_apps_ratio": by["three apps", "rounds 2-3"]["ratio"],
        "three_apps_2_slots_ratio": by["three apps, 2 slots", "rounds 2-3"]["ratio"] if len(apps) > 1 else None,
        "restart_speedup": round(cold_same / restart, 2),
        "restart_speedup_vs_agent_first": round(cold_first / restart, 2),
        "restart_target": RESTART_TARGET,
        "restart_target_met": min(cold_same, cold_first) / restart >= RESTART_TARGET,
        # the gateway's own routing time: the first query after a restart also warms its encoder
        "gateway_recall_s": {"restart": _median(ours, "restart", "gateway_recall_s"),
                             "agent_later": _median(ours, "agent", "gateway_recall_s", later)},
    }
    decisions = {"requests": len(ours), "graft_on_expected": len(ours) - len(wrong), "ok": not wrong,
                 "mismatches": wrong, "reused_from": reuse}
    return {"rows": rows, "summary": summary, "decisions": decisions}
