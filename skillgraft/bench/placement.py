"""``skillgraft bench placement``: the shapes agents send, timed through ``skillgraft serve``
against plain llama-server with its defaults (host prompt cache on), side by side.

The agent is the ``bench agent`` operations assistant with its six tools sent the usual way, as
the OpenAI ``tools`` parameter (its system prompt holds its rules only). Both systems run the
same model and llama-server binary, one slot, one token per request (``max_tokens`` 1: a
request's time is its prefill), greedy, one request at a time, taking turns segment by segment
(the one going first alternating), request by request. llama-server is sent the skill pasted where a user pastes it:
a system message after the app's prompt, and in a conversation before the turn that first needs
it (a skill pasted once stays). The gateway is sent the app's chat alone and places the routed
skill itself. Where llama-server's chat template drops the ``tools`` parameter (SmolLM2's: the
model never sees the tools), a second llama-server is sent the same tools pasted at the end of
the app's system prompt, as the gateway places them (``llama-server, tools pasted``): the same
work, beside the shape users send.

Scenarios, in this order on each system:

- ``first sighting``: six skills, one question each, behind the agent's prompt and tools;
- ``same skill again``: the same six skills, two more questions each;
- ``conversation``: eight turns over four topics (fixed assistant replies), topics coming back;
- ``add_manual first sighting`` / ``add_manual again``: the first two again over a store whose
  manuals were added with ``add_manual`` (captured ahead), against a restarted llama-server.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Callable, Iterator, Optional

from . import agent_data as data
from ..core.progress import Progress
from ..core.tools import Tool, output_format
from .agent import SETTLE_S, GatewaySystem, LlamaServerSystem, _answer
from .agent_rows import compared_row, recorder, seconds, take_turns
from .agent_texts import Texts

__all__ = ["bench_placement", "agent_tools"]

MAX_TOKENS = 1
TOOLS_PASTED = "llama-server, tools pasted"
AGAIN_ROUNDS = (1, 2)  # SKILL_QUESTIONS' second and third question of each skill
CONVERSATION = (  # (skill the turn needs, user turn, fixed assistant reply)
    ("postgres-backup", "How do I restore a single table from the weekly postgres dump?",
     "Use pg_restore with --table on the weekly dump, into a scratch database first, then copy the rows over."),
    ("postgres-backup", "Is it safe to run pg_dump against the primary database at noon?",
     "Run it against a streaming replica instead: a dump at peak load slows the primary."),
    ("tls-renewal", "Different topic: the TLS certificate of api.tidewater.io expires in 12 days; how do I renew it?",
     "Renew it through the internal ACME server with the renewal job, then check the new expiry date."),
    ("k8s-crashloop", "And my payments-worker pods are in CrashLoopBackOff since the last release; how do I debug it?",
     "Look at the previous container's logs and the pod's events first; compare the release's config with the last one."),
    ("postgres-backup", "Back to the dump: what does the pg-backup-stale alert mean and how do I check the backups?",
     "It fires when the newest base backup is older than a day; list the backups and check the last job's log."),
    ("k8s-crashloop", "A pod shows exit code 137 OOMKilled; should I raise its memory limit?",
     "First check whether memory grows steadily (a leak) or peaks at start-up; raise the limit only for the latter."),
    ("dns-change", "One more thing: how do I point status.tidewater.io to a new IP address in DNS?",
     "Lower the record's TTL first, wait out the old TTL, then change the A record in tide-dns."),
    ("tls-renewal", "cert-manager says my certificate is not ready, what should I check?", ""),
)
_SIGNATURE = re.compile(r"^(\w+)\((.*)\)$")
_TYPES = {"string": "string", "integer": "integer", "list[string]": "array"}


def agent_tools() -> list[dict]:
    """The agent's six tools as OpenAI's ``tools`` parameter (from their signatures and descriptions)."""
    tools = []
    for text in data.TOOLS:
        signature, *description = text.splitlines()
        name, arguments = _SIGNATURE.match(signature.strip()).groups()
        properties, required = {}, []
        for argument in filter(None, (a.strip() for a in arguments.split(", "))):
            left, _, default = argument.partition(" = ")
            key, _, kind = left.partition(": ")
            schema = {"type": _TYPES[kind]}
            if kind == "list[string]":
                schema["items"] = {"type": "string"}
            properties[key] = schema
            if not default:
                required.append(key)
        tools.append({"type": "function", "function": {
            "name": name, "description": " ".join(line.strip() for line in description),
            "parameters": {"type": "object", "properties": properties, "required": required}}})
    return tools


def agent_prompt() -> str:
    """The agent's system prompt without its tools (they go in the ``tools`` parameter)."""
    return data.RULES.split("You can call these tools")[0].rstrip() + "\n"


class _Asker:
    """One system asked in the agent's shape: the app's chat to the gateway, the chat with the
    skills pasted to llama-server; every request with the tools."""

    def __init__(self, system, manuals: dict, tools: list[dict], *, tools_pasted: bool = False) -> None:
        self.system, self.manuals, self.tools, self.tools_pasted = system, manuals, tools, tools_pasted
        self.name = TOOLS_PASTED if tools_pasted else system.name

    def ask(self, prompt: str, turns: list[tuple[str, str, str]]) -> dict:
        """``turns``: (skill, role, content) in order; the last is the user's question."""
        pasting = self.system.name == "llama-server"
        if self.tools_pasted:  # the tools' text where the gateway places it: the end of the app's prompt
            prompt = output_format([Tool.from_openai(t) for t in self.tools]).lead([("system", prompt)])[0][1]
        messages, pasted = [{"role": "system", "content": prompt}], set()
        for skill, role, content in turns:
            if pasting and role == "user" and skill not in pasted:
                messages.append({"role": "system", "content": self.manuals[skill][0]})
                pasted.add(skill)
            messages.append({"role": role, "content": content})
        body = {"messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0}
        if not self.tools_pasted:
            body["tools"] = self.tools
        if pasting:
            body["cache_prompt"] = True
        else:
            body["model"] = self.system.model
        started = time.perf_counter()
        response = self.system.client.post("/v1/chat/completions", json=body)
        seconds = time.perf_counter() - started
        reply = _answer(response, self.name)
        note = reply.get("skillgraft") or {}
        cache_n = note["cache_n"] if note else int((reply.get("timings") or {}).get("cache_n", 0))
        return {"seconds": seconds, "prompt_tokens": reply["usage"]["prompt_tokens"], "cache_n": cache_n,
                "decision": note.get("decision", "pasted"), "block": note.get("block_name") or "",
                "skills": [f"{s['block_name']}@{s['turn']}" for s in note.get("skills", ())],
                "conversation": note.get("conversation", "")}


def _scenarios(asker: _Asker, prompt: str, record: Callable[[dict], None], *, captured: bool) -> Iterator[str]:
    """The scenarios on one system; yields each request's scenario once it is answered (the
    systems take turns request by request)."""
    prefix = "add_manual " if captured else ""

    def ask(scenario: str, round_: int, turns: list, skill: str) -> str:
        record({"system": asker.name, "scenario": prefix + scenario, "round": round_, "expected": skill,
                "question": turns[-1][2], **asker.ask(prompt, turns)})
        return prefix + scenario

    for name, questions in data.SKILL_QUESTIONS.items():
        yield ask("first sighting", 1, [(name, "user", questions[0])], name)
    for r in AGAIN_ROUNDS:
        for name, questions in data.SKILL_QUESTIONS.items():
            yield ask("same skill again", r + 1, [(name, "user", questions[r])], name)
    if captured:
        return
    turns: list = []
    for i, (skill, question, reply) in enumerate(CONVERSATION):
        turns.append((skill, "user", question))
        yield ask("conversation", i + 1, list(turns), skill)
        turns.append((skill, "assistant", reply))


def requests_per_system() -> int:
    skills = len(data.SKILL_QUESTIONS)
    return 2 * (skills * (1 + len(AGAIN_ROUNDS))) + len(CONVERSATION)


def drops_tools(server) -> bool:
    """Whether ``server``'s chat template renders nothing of the ``tools`` parameter (llama-server
    then answers as if the agent had sent none)."""
    chat = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    rendered = [_answer(server.client.post("/apply-template", json={"messages": chat, **extra}), server.name)["prompt"]
                for extra in ({}, {"tools": agent_tools()})]
    return rendered[0] == rendered[1]


def bench_placement(model: Optional[str] = None, progress: Progress = None) -> dict:
    """Time to first token in the four shapes (module docstring), the gateway against
    llama-server with its defaults. Returns ``{"rows", "requests", ...}``."""
    from ..config import default_model
    from ..engine.models import settings_for

    model = model or default_model()
    texts, tools, prompt = Texts(False), agent_tools(), agent_prompt()
    manuals = {name: texts.manuals[name] for name in data.SKILL_QUESTIONS}
    started = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="skillgraft-bench-placement-"))
    servers: list = []
    try:
        servers.append(LlamaServerSystem(model, manuals))
        peers = [_Asker(servers[0], manuals, tools)]
        if drops_tools(servers[0]):  # the same work beside it: the tools pasted where the gateway places them
            servers.append(LlamaServerSystem(model, manuals))
            peers.append(_Asker(servers[1], manuals, tools, tools_pasted=True))
        records, record = recorder((1 + len(peers)) * requests_per_system(), progress)
        for captured in (False, True):
            if captured:
                for server in servers:
                    server.restart()
            gateway = GatewaySystem(workdir / ("captured" if captured else "text"), model, manuals, captured=captured,
                                    settle=texts.settle_threshold)
            try:
                ours = _Asker(gateway, manuals, tools)
                take_turns([(_scenarios(ours, prompt, record, captured=captured), SETTLE_S),
                            *((_scenarios(peer, prompt, record, captured=captured), 0.0) for peer in peers)])
            finally:
                gateway.stop()
        build, peer_flags = servers[0].server.build, servers[0].server.flags
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    settings = settings_for(model)
    return {"kind": "placement", "model": model, "server_build": build, "n_threads": settings.n_threads,
            "n_ctx": settings.n_ctx, "max_tokens": MAX_TOKENS, "llama_server_flags": peer_flags,
            "tools_dropped_by_llama_server": len(peers) > 1, "rows": _rows(records), "requests": records, "wall_s": round(time.perf_counter() - started, 2)}


def _rows(records: list[dict]) -> list[dict]:
    """The table: each scenario against llama-server as sent, then against the tools pasted
    (where that system ran; its measures say so)."""
    times = partial(seconds, records)
    turns = len(CONVERSATION)
    wanted = [(prefix + scenario, measure, None, False) for prefix in ("", "add_manual ") for scenario, measure in (
        ("first sighting", "six skills, one question each"), ("same skill again", "six skills, two more questions each"))]
    wanted += [("conversation", "turn 1 (first sighting)", {1}, False),
               ("conversation", f"turns 2-{turns}, each", set(range(2, turns + 1)), False),
               ("conversation", f"turns 2-{turns}, total", set(range(2, turns + 1)), True)]
    return [compared_row(records, other, scenario, measure + label, rounds, total=total)
            for other, label in (("llama-server", ""), (TOOLS_PASTED, " (tools pasted for llama-server)"))
            for scenario, measure, rounds, total in wanted
            if times("skillgraft", scenario, rounds) and times(other, scenario, rounds)]
