"""A team assistant behind the gateway: two teams, one memory each, tools, several turns.

The script sets up what an operator would: a home whose base holds the skills every team
shares, a namespace per team holding a few of its own skills (real Agent Skills folders from
tests/data/agent_skills, imported with the CLI: no model runs), and a key file (mode 600) that
gives each team's key its namespace. It starts ``skillgraft serve`` on loopback (the embedded
SmolLM2-135M) and gives each team an OpenAI Agents SDK agent: an ``Agent`` with two
``function_tool`` tools (a calculator and a reader of this repository's files), run with
``Runner.run`` through ``OpenAIChatCompletionsModel`` on an ``AsyncOpenAI`` client that holds
the team's key. The SDK runs the tools and sends their results back; the teams take turns.
Tracing is disabled, so nothing leaves the machine.

Every request the agents sent is then sent again, in the same order, through an
``AsyncOpenAI`` client to a plain llama-server started with the same binary and model (the
gateway's own llama-servers take only its private key): the same system prompt, the same
tools described the same way and held to the same grammar, and the text of the skills the
gateway placed pasted where the gateway placed them. Both clients time each request the same
way (from sending it to the last byte of the reply) and keep the usage the server reported.
The summary sets the two side by side: time per request, prompt tokens, and the tokens each
had to prefill (the prompt less the cells it reused).

Run: .venv/bin/python examples/team_assistant.py [--quick]   (make server first)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import unquote

import httpx
from agents import (Agent, ModelBehaviorError, ModelSettings, OpenAIChatCompletionsModel, RunErrorHandlerInput, Runner,
                    Usage, function_tool, set_tracing_disabled)
from openai import AsyncOpenAI

from arithmetic import evaluate  # examples/arithmetic.py
from skillgraft.bench.serve import GatewayProcess
from skillgraft.core.tools import output_format, tool_calls_turn, tool_result_turn
from skillgraft.server.engine import LlamaServerEngine

REPO = Path(__file__).resolve().parent.parent
SKILLS = REPO / "tests" / "data" / "agent_skills"
MODEL = "smollm2-135m"
MAX_TOKENS = 48
MAX_STEPS = 2  # model calls per user turn (the SDK's max_turns): a tool call, then an answer from its result

BASE = ["git-commit-messages", "release-notes"]
TEAMS = {
    "platform": {
        "skills": ["terraform-plan-review", "incident-postmortem", "log-analysis"],
        "system": "You are the platform team's assistant. Answer briefly. Use a tool when it helps.",
        "turns": [
            "Our terraform plan says 2 to add, 1 to destroy: aws_db_instance.main. Is it safe to apply?",
            "The outage lasted from 09:40 to 11:25. Use the calculator: how many minutes is 105 + 40?",
            "Read the file Makefile and tell me which target runs the tests.",
            "Write the commit message for the change that pins the terraform provider version.",
        ],
    },
    "data": {
        "skills": ["spreadsheet-formulas", "csv-chart-report", "regex-crafting"],
        "system": "You are the data team's assistant. Answer briefly. Use a tool when it helps.",
        "turns": [
            "Which spreadsheet formula sums column B where column A says paid?",
            "Use the calculator: what is 1250 * 18 / 100?",
            "Write a regex that matches ISO dates such as 2026-12-07.",
            "Draft the release notes for version 2.3 of our reporting tool.",
        ],
    },
}


def repository_file(path: str) -> str:
    target = (REPO / str(path)).resolve()
    if REPO not in target.parents or not target.is_file():
        return f"error: no file {path!r} in the repository"
    return target.read_text(errors="replace")[:800]


@function_tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression such as 12 * (3 + 4)."""
    result = evaluate(expression)
    print(f"      tool calculator({json.dumps({'expression': expression})}) -> {result[:60]!r}")
    return result


@function_tool
def read_file(path: str) -> str:
    """Read a text file of the repository by its relative path (first 800 characters)."""
    result = repository_file(path)
    print(f"      tool read_file({json.dumps({'path': path})}) -> {result[:60]!r}")
    return result


# -- setting up the home -------------------------------------------------------------------

def cli(home: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "skillgraft", "--home", str(home), *args], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def import_skills(home: Path, names: list[str], namespace: str = "") -> None:
    """``skillgraft --home H [--namespace T] skills import FOLDER`` over a folder of copies."""
    with tempfile.TemporaryDirectory(prefix="skills-") as folder:
        for name in names:
            shutil.copytree(SKILLS / name, Path(folder) / name)
        cli(home, *(["--namespace", namespace] if namespace else []), "skills", "import", folder)


def skill_text(name: str) -> str:
    """The text pasted for the plain llama-server: the skill's SKILL.md body."""
    text = (SKILLS / name / "SKILL.md").read_text()
    return text.split("---", 2)[2].strip() if text.startswith("---") else text


# -- the agents through the gateway ----------------------------------------------------------

class Exchanges:
    """Every chat request an ``AsyncOpenAI`` client of this script sends: its body, the reply's
    headers and body, and the seconds from sending it to the reply's last byte."""

    def __init__(self) -> None:
        self.records: list[dict] = []
        self.label: dict = {}
        self._sent_at: dict[int, float] = {}

    def client(self, base_url: str, api_key: str) -> AsyncOpenAI:
        hooks = {"request": [self._sent], "response": [self._received]}
        http = httpx.AsyncClient(event_hooks=hooks, trust_env=False, timeout=600)
        return AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, http_client=http)

    async def _sent(self, request: httpx.Request) -> None:
        self._sent_at[id(request)] = time.perf_counter()

    async def _received(self, response: httpx.Response) -> None:
        await response.aread()
        seconds = time.perf_counter() - self._sent_at.pop(id(response.request))
        self.records.append({**self.label, "request": json.loads(response.request.content), "seconds": seconds,
                             "headers": response.headers, "reply": response.json() if response.is_success else None})


def placed_skills(headers) -> list[tuple[str, int]]:
    """``x-skillgraft-skills``: ``name@turn`` for each skill in the prompt."""
    out = []
    for item in filter(None, (headers.get("x-skillgraft-skills") or "").split(",")):
        name, _, turn = item.rpartition("@")
        out.append((unquote(name), int(turn)))
    return out


def last_tool_result(data: RunErrorHandlerInput) -> str:
    """The answer of a run that still called a tool on its last model call: that tool's result."""
    outputs = [item.output for item in data.run_data.new_items if item.type == "tool_call_output_item"]
    return f"(the tool said) {outputs[-1]}" if outputs else "(no answer: the model kept calling tools)"


def check_usage(usage: Usage, records: list) -> None:
    """The SDK's usage of a run agrees with what the server reported for the requests it sent."""
    reported = (len(records), sum(r["reply"]["usage"]["prompt_tokens"] for r in records),
                sum(r["reply"]["usage"]["completion_tokens"] for r in records))
    if (usage.requests, usage.input_tokens, usage.output_tokens) != reported:
        raise RuntimeError(f"the SDK counted {usage}, the server reported (requests, prompt, completion) {reported}")


def team_agent(team: str, system: str, client: AsyncOpenAI) -> Agent:
    return Agent(name=f"{team} assistant", instructions=system, tools=[calculator, read_file],
                 model=OpenAIChatCompletionsModel(model=MODEL, openai_client=client),
                 model_settings=ModelSettings(max_tokens=MAX_TOKENS, temperature=0, tool_choice="auto"))


async def run_teams(gateway_url: str, team_keys: dict, n_turns: int, exchanges: Exchanges) -> list:
    """Each team's agent over its turns, the teams taking turns as on a shared gateway; one log
    entry per model call, with what the gateway reported about it."""
    clients = {team: exchanges.client(f"{gateway_url}/v1", key) for team, key in team_keys.items()}
    agents = {team: team_agent(team, spec["system"], clients[team]) for team, spec in TEAMS.items()}
    chats: dict[str, list] = {team: [] for team in TEAMS}
    try:
        for turn in range(n_turns):
            for team, spec in TEAMS.items():
                question = spec["turns"][turn]
                chats[team].append({"role": "user", "content": question})
                print(f"  [{team}] turn {turn + 1}: {question}", flush=True)
                exchanges.label = {"team": team, "turn": turn}
                first = len(exchanges.records)
                try:
                    result = await Runner.run(agents[team], chats[team], max_turns=MAX_STEPS,
                                              error_handlers={"max_turns": last_tool_result})
                    answer = str(result.final_output or "")
                    check_usage(result.context_wrapper.usage, exchanges.records[first:])
                except ModelBehaviorError:  # the SDK refuses a reply cut at max_tokens before any text or call
                    if exchanges.records[-1]["reply"]["choices"][0]["finish_reason"] != "length":
                        raise
                    answer = "(no answer: the reply ran out of tokens before any text or tool call)"
                chats[team].append({"role": "assistant", "content": answer})
                last = exchanges.records[-1]
                print(f"      {(last['reply'].get('skillgraft') or {}).get('decision')}, skills "
                      f"{[f'{n}@{t}' for n, t in placed_skills(last['headers'])]}: "
                      f"{' '.join(answer.split())[:90]!r}", flush=True)
    finally:
        for client in clients.values():
            await client.close()
    log = []
    for record in exchanges.records:
        note = record["reply"].get("skillgraft") or {}
        step = sum(1 for e in log if (e["team"], e["turn"]) == (record["team"], record["turn"]))
        log.append({"team": record["team"], "turn": record["turn"], "step": step, "request": record["request"],
                    "seconds": record["seconds"], "prompt_tokens": record["reply"]["usage"]["prompt_tokens"],
                    "cache_n": int(note.get("cache_n") or 0), "decision": note.get("decision"),
                    "skills": placed_skills(record["headers"])})
    return log


# -- the same requests to a plain llama-server -------------------------------------------------

def plain_chat(messages: list, tools: list, skills: list[tuple[str, int]]) -> list[dict]:
    """The request as plain chat turns: the tools described at the end of the system prompt as
    the gateway describes them, calls and results written back as the gateway writes them, and
    each placed skill's text pasted as a system turn just before the user turn it entered at."""
    names = {}
    turns: list[tuple[str, str]] = []
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            calls = [(c["function"]["name"], json.loads(c["function"]["arguments"] or "{}")) for c in m["tool_calls"]]
            names.update({c["id"]: c["function"]["name"] for c in m["tool_calls"]})
            turns.append(("assistant", tool_calls_turn(calls, m.get("content") or "")))
        elif m["role"] == "tool":
            turns.append(("user", tool_result_turn(names.get(m["tool_call_id"], "tool"), m["content"])))
        else:
            turns.append((m["role"], m["content"] or ""))
    turns = output_format(tools, "auto").lead(turns)
    out, user_index = [], 0
    for role, content in turns:
        if role == "user" and not content.startswith("Tool "):
            for name, at in skills:
                if at == user_index and (SKILLS / name).is_dir():
                    out.append({"role": "system", "content": skill_text(name)})
            user_index += 1
        out.append({"role": role, "content": content})
    return out


async def replay_plain(log: list) -> None:
    """Each logged request, in order, to a plain llama-server through an ``AsyncOpenAI`` client."""
    engine = LlamaServerEngine(MODEL, n_slots=1)
    exchanges = Exchanges()
    client = exchanges.client(f"{engine.url}/v1", engine._api_key)
    try:
        for entry in log:
            request = entry["request"]
            await client.chat.completions.create(
                model=MODEL, messages=plain_chat(request["messages"], request["tools"], entry["skills"]),
                max_tokens=request["max_tokens"], temperature=request["temperature"],
                extra_body={"cache_prompt": True, "grammar": output_format(request["tools"], "auto").grammar})
            record = exchanges.records[-1]
            entry["plain_seconds"] = record["seconds"]
            entry["plain_prompt_tokens"] = record["reply"]["usage"]["prompt_tokens"]
            entry["plain_cache_n"] = int((record["reply"].get("timings") or {}).get("cache_n", 0))
    finally:
        await client.close()
        engine.close()


# -- the run -------------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one base skill, two per team, two turns each")
    args = parser.parse_args()
    base = BASE[:1] if args.quick else BASE
    n_skills, n_turns = (2, 2) if args.quick else (3, 4)

    with tempfile.TemporaryDirectory(prefix="skillgraft-team-") as tmp:
        home, keys = Path(tmp) / "home", Path(tmp) / "keys"
        print("== the home: base skills, one namespace per team, a key file ==", flush=True)
        import_skills(home, base)
        print(f"  base      {', '.join(base)}")
        team_keys = {}
        for team, spec in TEAMS.items():
            import_skills(home, spec["skills"][:n_skills], namespace=team)
            team_keys[team] = secrets.token_hex(24)
            print(f"  {team:9} {', '.join(spec['skills'][:n_skills])}")
        fd = os.open(keys, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.writelines(f"{team} {key}\n" for team, key in team_keys.items())
        print(f"  key file  mode {oct(keys.stat().st_mode & 0o777)}, one key per team", flush=True)

        print("\n== each team's Agents SDK agent talks to the gateway (tools: calculator, read_file) ==", flush=True)
        set_tracing_disabled(True)  # the SDK would otherwise export traces to OpenAI's servers
        gateway = GatewayProcess(home, servers=1, model=None, log_path=Path(tmp) / "gateway.log",
                                 extra_args=["--keys", str(keys)])
        try:
            log = asyncio.run(run_teams(gateway.url, team_keys, n_turns, Exchanges()))
        finally:
            gateway.stop()

        print("\n== the same requests to a plain llama-server, skill text pasted ==", flush=True)
        print("  (the gateway's llama-servers take only its private key: a plain one is started, same binary and model)")
        asyncio.run(replay_plain(log))

    print("\n== per request: the gateway with the memory vs plain llama-server with the skill pasted ==")
    print(f"  {'team':9} {'turn':>4} {'step':>4} {'decision':8} {'skills placed':34} "
          f"{'prompt':>6} {'prefilled':>9} {'seconds':>7} | {'prompt':>6} {'prefilled':>9} {'seconds':>7}")
    for e in log:
        skills = ",".join(f"{n}@{t}" for n, t in e["skills"]) or "-"
        print(f"  {e['team']:9} {e['turn'] + 1:4} {e['step'] + 1:4} {str(e['decision']):8} {skills[:34]:34} "
              f"{e['prompt_tokens']:6} {e['prompt_tokens'] - e['cache_n']:9} {e['seconds']:7.2f} | "
              f"{e['plain_prompt_tokens']:6} {e['plain_prompt_tokens'] - e['plain_cache_n']:9} {e['plain_seconds']:7.2f}")

    print("\n== summary ==")
    for team in TEAMS:
        mine = [e for e in log if e["team"] == team]
        placed = sorted({n for e in mine for n, _ in e["skills"]})
        print(f"team {team}: {len(mine)} requests, skills placed: {', '.join(placed) or 'none'}")
    g_s, p_s = sum(e["seconds"] for e in log), sum(e["plain_seconds"] for e in log)
    g_pre = sum(e["prompt_tokens"] - e["cache_n"] for e in log)
    p_pre = sum(e["plain_prompt_tokens"] - e["plain_cache_n"] for e in log)
    print(f"requests: {len(log)}")
    print(f"time to answer: gateway {g_s:.2f} s, plain llama-server {p_s:.2f} s ({p_s / g_s:.2f}x)")
    print(f"prompt tokens prefilled: gateway {g_pre}, plain llama-server {p_pre}")
    print(f"prompt tokens sent: gateway {sum(e['prompt_tokens'] for e in log)}, "
          f"plain llama-server {sum(e['plain_prompt_tokens'] for e in log)}")


if __name__ == "__main__":
    main()
