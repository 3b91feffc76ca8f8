"""What llama-server's own OpenAI endpoint does with tools after a restored block, and why the
gateway renders tools itself.

For each embedded model: capture a manual's block through a started llama-server, restore it
into slot 0, then ask the server's own ``/v1/chat/completions`` (its Jinja chat template, its
tool handling) the same chat — the block's text as the system turn, a question — plainly,
with a tool, and with the tool required, on the restored slot (``id_slot``, ``cache_prompt``).
Reported per case: the block's cells, the server's ``timings.cache_n`` (cells it reused) and
``prompt_n``, whether the answer is a tool call, and whether the server's prompt equals
skillgraft's own rendering. Then the same through skillgraft's pipeline (the gateway's
route): its own rendering, the tools in front of the user's message and a grammar.

    .venv/bin/python benchmarks/server_chat_tools.py [--out docs/data/server_chat_tools.json]
"""

from __future__ import annotations

import argparse
import platform
import sys

from skillgraft.core.answer import AnswerOptions, AnswerPlan
from skillgraft.core.chat_layout import block_tokens, chat_tokens
from skillgraft.core.pipeline import AnswerPipeline
from skillgraft.core.recall import Recall
from skillgraft.core.blocks import Block
from skillgraft.core.tools import output_format
from skillgraft.server.engine import LlamaServerEngine

from reports import write_report

MANUAL = (
    "Skill manual: squashing commits with git. Run git rebase -i HEAD~N, keep the first line as pick "
    "and change the others to squash. Push with git push --force-with-lease."
)
QUESTION = "How do I squash my last three commits with git?"
TOOL = {"type": "function", "function": {
    "name": "run_git", "description": "Run a git command",
    "parameters": {"type": "object", "properties": {"command": {"type": "string", "maxLength": 40}}, "required": ["command"]},
}}
CASES = {"plain": {}, "tools": {"tools": [TOOL]}, "tool required": {"tools": [TOOL], "tool_choice": "required"}}
MAX_TOKENS = 64


def server_route(engine: LlamaServerEngine, state, messages: list) -> list[dict]:
    """The server's own chat endpoint on the restored slot, per case."""
    ours = chat_tokens(engine, [(m["role"], m["content"]) for m in messages])
    rows = []
    for case, extra in CASES.items():
        engine.restore(state, "probe", slot=0)
        body = {"messages": messages, "id_slot": 0, "cache_prompt": True, "max_tokens": MAX_TOKENS, "temperature": 0, **extra}
        reply = engine._request("POST", "/v1/chat/completions", json=body)
        rendered = engine._request("POST", "/apply-template", json={"messages": messages, **extra})["prompt"]
        served = engine._request("POST", "/tokenize", json={"content": rendered, "add_special": True,
                                                            "parse_special": True})["tokens"]
        message = reply["choices"][0]["message"]
        rows.append({
            "route": "llama-server /v1/chat/completions", "case": case, "block_cells": state.n_tokens,
            "cache_n": reply["timings"]["cache_n"], "prompt_n": reply["timings"]["prompt_n"],
            "tool_call": bool(message.get("tool_calls")), "prompt_equals_skillgraft": served == ours,
            "reply": (message.get("content") or "")[:120],
        })
    return rows


def pipeline_route(engine: LlamaServerEngine, state) -> list[dict]:
    """skillgraft's own route: the one pipeline on the same slot (as the gateway runs it)."""
    block = Block(id="probe", sha256="0" * 64, name="probe", kind="manual", source=MANUAL, tokens=state.tokens,
                  tokens_sha256="", n_tokens=state.n_tokens, n_bytes=state.n_bytes,
                  fingerprint_id=engine.fingerprint.id, created_at="")
    recall = Recall("graft", block, 1.0, 0.3, "probe")
    plan = AnswerPlan((("user", QUESTION),), QUESTION, recall, -100.0, state=state)
    pipeline = AnswerPipeline(engine)
    rows = []
    for case, extra in CASES.items():
        form = output_format(extra.get("tools"), extra.get("tool_choice"))
        with engine.answer_slot(0) as slot:
            answer = pipeline.answer(plan, slot, AnswerOptions(max_tokens=MAX_TOKENS, format=form))
        rows.append({
            "route": "skillgraft pipeline (/completion)", "case": case, "block_cells": state.n_tokens,
            "cache_n": answer.note.cache_n, "prompt_n": answer.end.prompt_tokens - answer.note.cache_n,
            "tool_call": bool(answer.tool_calls), "prompt_equals_skillgraft": True, "reply": answer.text[:120],
        })
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/data/server_chat_tools.json")
    args = parser.parse_args()
    rows = []
    for model in ("smollm2-135m", "gemma3-270m"):
        with LlamaServerEngine(model) as engine:
            state = engine.capture(block_tokens(engine, MANUAL))
            messages = [{"role": "system", "content": MANUAL}, {"role": "user", "content": QUESTION}]
            for row in server_route(engine, state, messages) + pipeline_route(engine, state):
                rows.append({"model": model, **row})
            build = engine.build
    report = {"machine": platform.machine(), "python": sys.version.split()[0], "llama_server_build": build,
              "max_tokens": MAX_TOKENS, "rows": rows}
    return write_report(report, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
