"""Does a model behind skillgraft call a tool when the request needs none, and reply when it
needs one? The same chats through the in-process memory (tools in the app's prefix, the
answer held to the tools envelope) and through plain llama-server with its defaults (tools in
the OpenAI ``tools`` parameter, rendered by the model's own chat template), no skill either way.

    python benchmarks/tool_choice_eval.py smollm2-135m qwen2.5-coder-0.5b --out docs/data/tool_choice.json

Counts, for each model and system: plain questions answered with a tool call (wrong), requests
that need a tool answered with a call (right) and with the right tool, and calls written out as
text (JSON in the reply: no call is made).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path


def _function(name: str, description: str, **properties: str) -> dict:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": {k: {"type": "string", "description": v} for k, v in properties.items()},
        "required": list(properties)}}}


TOOLS = [
    _function("read_file", "Read a file of the project and return its text.", path="the file's path"),
    _function("write_file", "Write text to a file of the project, replacing it.", path="the file's path", text="the new text"),
    _function("list_dir", "List the files in a folder of the project.", path="the folder's path"),
    _function("run_shell", "Run a shell command in the project and return its output.", command="the command line"),
    _function("search_code", "Search the project's code for a text and return the matching lines.", query="the text to find"),
    _function("fetch_url", "Download a web page and return its text.", url="the page's address"),
]
SYSTEM = "You are a coding assistant working in the user's project. Be brief."
PLAIN = [
    "Say hello.", "What is 17 * 23?", "Explain a Python list comprehension in one sentence.",
    "Write a haiku about autumn.", "What does HTTP status 404 mean?", "Translate 'good morning' into French.",
    "Suggest a name for a cat.", "What is the capital of Japan?", "How do I reverse a string in Python?",
    "Summarise what git rebase does in one sentence.", "Thanks, that's all for today.",
    "What is a closure in JavaScript?",
]
NEEDS_TOOL = [
    ("Read the file setup.py and tell me the version.", "read_file"),
    ("List the files in the src folder.", "list_dir"),
    ("Run the test suite with pytest.", "run_shell"),
    ("Create a file notes.txt that says hello.", "write_file"),
    ("Search the code for TODO comments.", "search_code"),
    ("Fetch https://example.com and tell me its title.", "fetch_url"),
    ("Show me what is in README.md.", "read_file"),
    ("Which files are in the tests directory?", "list_dir"),
    ("Run git status.", "run_shell"),
    ("Find where the function parse_args is defined.", "search_code"),
    ("Download https://httpbin.org/json and show it.", "fetch_url"),
    ("Open config.yaml and tell me the port.", "read_file"),
]
MAX_TOKENS = 48


def _written_out(row: dict) -> bool:
    """A reply that is a tool call written as text (JSON, perhaps fenced), not made."""
    return not row["calls"] and row["text"].lstrip().startswith(("{", "```json"))


def tally(rows: list[dict]) -> dict:
    """The counts of :data:`rows` (one a chat: its kind, the tool it wants, the calls made, the text)."""
    plain = [row for row in rows if row["kind"] == "plain"]
    needed = [row for row in rows if row["kind"] == "tool"]
    return {
        "plain_questions": len(plain), "plain_called_a_tool": sum(bool(r["calls"]) for r in plain),
        "plain_wrote_a_call_as_text": sum(_written_out(r) for r in plain),
        "tool_requests": len(needed), "tool_requests_called": sum(bool(r["calls"]) for r in needed),
        "tool_requests_right_tool": sum(bool(r["calls"]) and r["calls"][0] == r["wants"] for r in needed),
        "tool_requests_wrote_a_call_as_text": sum(_written_out(r) for r in needed),
    }


def _chats():
    for question in PLAIN:
        yield "plain", "", question
    for question, tool in NEEDS_TOOL:
        yield "tool", tool, question


def through_memory(model: str) -> dict:
    from skillgraft import AnswerOptions, SkillMemory
    from skillgraft.core.tools import output_format

    options = AnswerOptions(max_tokens=MAX_TOKENS, format=output_format(tools=TOOLS))
    rows = []
    with tempfile.TemporaryDirectory() as home, SkillMemory(Path(home) / "store", model=model) as memory:
        for kind, want, question in _chats():
            answer = memory.answer([("system", SYSTEM), ("user", question)], options, route=False)
            calls = [call.name for call in answer.tool_calls]
            rows.append({"question": question, "kind": kind, "wants": want, "calls": calls, "text": answer.text[:120]})
    return {"summary": tally(rows), "rows": rows}


def through_llama_server(model: str) -> dict:
    from skillgraft.bench.plain_server import PlainLlamaServer

    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        server = PlainLlamaServer(model, 1, Path(workdir))
        try:
            for kind, want, question in _chats():
                body = {"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
                        "tools": TOOLS, "max_tokens": MAX_TOKENS, "temperature": 0}
                reply = server.client.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]
                calls = [call["function"]["name"] for call in reply.get("tool_calls") or []]
                rows.append({"question": question, "kind": kind, "wants": want, "calls": calls,
                             "text": (reply.get("content") or "")[:120]})
        finally:
            server.stop()
    return {"summary": tally(rows), "rows": rows, "flags": server.flags}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    started = time.perf_counter()
    report: dict = {"kind": "tool-choice", "max_tokens": MAX_TOKENS, "models": {}}
    for model in args.models:
        report["models"][model] = {"skillgraft": through_memory(model), "llama-server": through_llama_server(model)}
        for system, result in report["models"][model].items():
            print(model, system, json.dumps(result["summary"]), file=sys.stderr)
    report["wall_s"] = round(time.perf_counter() - started, 1)
    text = json.dumps(report, indent=2) + "\n"
    if args.out:
        args.out.write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
