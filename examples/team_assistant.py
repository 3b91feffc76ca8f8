"""A team assistant behind the gateway: two teams, one memory each, tools, several turns.

The script sets up what an operator would: a home whose base holds the skills every team
shares, a namespace per team holding a few of its own skills (real Agent Skills folders from
tests/data/agent_skills, imported with the CLI: no model runs), and a key file (mode 600) that
gives each team's key its namespace. It starts ``skillgraft serve`` on loopback (the embedded
SmolLM2-135M) and runs an agent loop per team through the ``openai`` client: the tools go as
the OpenAI ``tools`` parameter (a calculator and a reader of this repository's files), a
tool call is run here and its result sent back, and the conversation goes on.

Every request is then sent again, in the same order, to a plain llama-server started with the
same binary and model (the gateway's own llama-servers take only its private key), with the
same system prompt, the same tools described the same way and held to the same grammar, and
the text of the skills the gateway placed pasted where the gateway placed them. The summary
sets the two side by side: time per request, prompt tokens, and the tokens each had to
prefill (the prompt less the cells it reused).

Run: .venv/bin/python examples/team_assistant.py [--quick]   (make server first)
"""

from __future__ import annotations

import argparse
import ast
import json
import operator
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
from openai import OpenAI

from skillgraft.bench.serve import GatewayProcess
from skillgraft.core.tools import output_format, tool_calls_turn, tool_result_turn
from skillgraft.server.engine import LlamaServerEngine

REPO = Path(__file__).resolve().parent.parent
SKILLS = REPO / "tests" / "data" / "agent_skills"
MODEL = "smollm2-135m"
MAX_TOKENS = 48
MAX_STEPS = 2  # model calls per user turn: a tool call, then an answer from its result

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

TOOLS = [
    {"type": "function", "function": {
        "name": "calculator", "description": "Evaluate an arithmetic expression such as 12 * (3 + 4).",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}}},
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a text file of the repository by its relative path (first 800 characters).",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}},
]
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.Pow: operator.pow, ast.USub: operator.neg, ast.Mod: operator.mod}


def calculator(expression: str) -> str:
    def ev(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.operand))
        raise ValueError("not arithmetic")

    try:
        return str(ev(ast.parse(str(expression), mode="eval").body))
    except (ValueError, SyntaxError, ZeroDivisionError, TypeError) as exc:
        return f"error: {exc}"


def read_file(path: str) -> str:
    target = (REPO / str(path)).resolve()
    if REPO not in target.parents or not target.is_file():
        return f"error: no file {path!r} in the repository"
    return target.read_text(errors="replace")[:800]


def run_tool(name: str, arguments: dict) -> str:
    if name == "calculator":
        return calculator(arguments.get("expression", ""))
    if name == "read_file":
        return read_file(arguments.get("path", ""))
    return f"error: no tool {name!r}"


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


# -- the agent loop through the gateway ------------------------------------------------------

def placed_skills(headers) -> list[tuple[str, int]]:
    """``x-skillgraft-skills``: ``name@turn`` for each skill in the prompt."""
    out = []
    for item in filter(None, (headers.get("x-skillgraft-skills") or "").split(",")):
        name, _, turn = item.rpartition("@")
        out.append((unquote(name), int(turn)))
    return out


def gateway_turn(client: OpenAI, messages: list, log: list, team: str, turn: int) -> str:
    """One user turn: call the model, run the tools it calls, until it answers; a model that
    still calls a tool on its last step is answered by that tool's last result."""
    result = ""
    for step in range(MAX_STEPS):
        started = time.perf_counter()
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=messages, tools=TOOLS, tool_choice="auto", max_tokens=MAX_TOKENS, temperature=0)
        seconds = time.perf_counter() - started
        reply = raw.parse()
        note = (reply.model_extra or {}).get("skillgraft") or {}
        message = reply.choices[0].message
        log.append({"team": team, "turn": turn, "step": step, "messages": json.loads(json.dumps(messages)),
                    "seconds": seconds, "prompt_tokens": reply.usage.prompt_tokens,
                    "cache_n": int(note.get("cache_n") or 0), "decision": note.get("decision"),
                    "skills": placed_skills(raw.headers)})
        if not message.tool_calls:
            return message.content or ""
        if step == MAX_STEPS - 1:
            return f"(the tool said) {result}" if result else "(no answer: the model kept calling tools)"
        messages.append({"role": "assistant", "content": message.content or "", "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
            for c in message.tool_calls]})
        for call in message.tool_calls:
            try:
                arguments = json.loads(call.function.arguments or "{}")
            except ValueError:
                arguments = {}
            result = run_tool(call.function.name, arguments)
            print(f"      tool {call.function.name}({json.dumps(arguments)}) -> {result[:60]!r}")
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return result


# -- the same requests to a plain llama-server -------------------------------------------------

def plain_chat(messages: list, skills: list[tuple[str, int]]) -> list[dict]:
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
    turns = output_format(TOOLS, "auto").lead(turns)
    out, user_index = [], 0
    for role, content in turns:
        if role == "user" and not content.startswith("Tool "):
            for name, at in skills:
                if at == user_index and (SKILLS / name).is_dir():
                    out.append({"role": "system", "content": skill_text(name)})
            user_index += 1
        out.append({"role": role, "content": content})
    return out


def replay_plain(log: list) -> None:
    grammar = output_format(TOOLS, "auto").grammar
    engine = LlamaServerEngine(MODEL, n_slots=1)
    try:
        headers = {"Authorization": f"Bearer {engine._api_key}"}
        with httpx.Client(base_url=engine.url, timeout=600, trust_env=False, headers=headers) as http:
            for entry in log:
                body = {"messages": plain_chat(entry["messages"], entry["skills"]), "max_tokens": MAX_TOKENS,
                        "temperature": 0, "cache_prompt": True, "grammar": grammar}
                started = time.perf_counter()
                response = http.post("/v1/chat/completions", json=body)
                entry["plain_seconds"] = time.perf_counter() - started
                response.raise_for_status()
                reply = response.json()
                entry["plain_prompt_tokens"] = reply["usage"]["prompt_tokens"]
                entry["plain_cache_n"] = int((reply.get("timings") or {}).get("cache_n", 0))
    finally:
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

        print("\n== the teams talk to the gateway (tools: calculator, read_file) ==", flush=True)
        gateway = GatewayProcess(home, servers=1, model=None, log_path=Path(tmp) / "gateway.log",
                                 extra_args=["--keys", str(keys)])
        log: list = []
        try:
            clients = {team: OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0, timeout=600)
                       for team, key in team_keys.items()}
            chats = {team: [{"role": "system", "content": spec["system"]}] for team, spec in TEAMS.items()}
            for turn in range(n_turns):
                for team, spec in TEAMS.items():  # the teams take turns, as on a shared gateway
                    question = spec["turns"][turn]
                    chats[team].append({"role": "user", "content": question})
                    print(f"  [{team}] turn {turn + 1}: {question}", flush=True)
                    answer = gateway_turn(clients[team], chats[team], log, team, turn)
                    chats[team].append({"role": "assistant", "content": answer})
                    last = log[-1]
                    print(f"      {last['decision']}, skills {[f'{n}@{t}' for n, t in last['skills']]}: "
                          f"{' '.join(answer.split())[:90]!r}", flush=True)
        finally:
            gateway.stop()

        print("\n== the same requests to a plain llama-server, skill text pasted ==", flush=True)
        print("  (the gateway's llama-servers take only its private key: a plain one is started, same binary and model)")
        replay_plain(log)

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
