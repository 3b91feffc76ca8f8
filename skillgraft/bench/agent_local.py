"""``skillgraft bench agent --in-process``: the agent in this process, :class:`SkillMemory`
against llama-cpp-python's own ``Llama`` on the same prompts.

- ``skillgraft``: a :class:`~skillgraft.memory.SkillMemory` over a fresh store holding the
  manual (stored as text), its in-process engine; the app sends its system prompt and chat,
  the memory places the routed manual after the app's system prompt, as a second system turn
  (the tokens the pasted manual makes), and continues what its context or a derived state holds.
- ``Llama``: ``create_chat_completion`` on one ``Llama`` (same model, threads, context and
  batch sizes, no extra buffer types, as the engine), which keeps its last prompt and
  evaluates only what follows the longest common prefix; the manual pasted as a second
  system message, as in the server benchmark.

One token per request (``max_tokens`` 1: a request's time is its prefill), greedy, one
request at a time; the two take turns scenario by scenario, the one going first alternating
(:func:`~.agent_rows.take_turns`). Scenarios:
``agent`` (six questions on one manual), ``conversation`` (eight turns, fixed replies),
``tool loop`` (three questions with two tools, each asked twice as an agent loop does: the
question, then the chat with the model's tool call and the tool's result; both held to the
same tool-call grammar); and, skillgraft alone, the conversation policy
(:mod:`skillgraft.bench.conversation_policy`).
"""

from __future__ import annotations

import shutil
import tempfile
from collections import Counter
import time
from functools import partial
from pathlib import Path
from typing import Callable, Iterator, Optional

from . import agent_data as data
from .agent import AGENT_MANUAL, CONVERSATION, MAX_TOKENS, _user
from .agent_texts import Texts
from .agent_rows import compared_row, recorder, take_turns
from ..kv.prefixes import common_prefix
from ..core.progress import Progress
from ..core.tools import Tool, output_format, tool_calls_turn, tool_result_turn
from .conversation_policy import TURNS, bench_policies, conversations

TOOLS = (
    Tool("tide_status", "Show a service's health in one region.",
         {"type": "object", "properties": {"service": {"type": "string"}, "region": {"type": "string"}},
          "required": ["service", "region"]}),
    Tool("tide_rollback", "Roll a service back to an earlier release in one region.",
         {"type": "object", "properties": {"service": {"type": "string"}, "to": {"type": "string"},
                                           "region": {"type": "string"}}, "required": ["service", "to", "region"]}),
)
LOOP_QUESTIONS = data.AGENT_QUESTIONS[:3]
LOOP_CALL = ("tide_status", {"service": "checkout", "region": "eu-west"})
LOOP_RESULT = "checkout in eu-west: 3/3 replicas ready, error rate 4.1 %, release r2024.11.04-3"


class MemorySystem:
    """:class:`SkillMemory` in this process over a fresh store holding ``manual``."""

    name = "skillgraft"

    def __init__(self, home: Path, model: Optional[str], manual: tuple[str, list], settle=None) -> None:
        from ..memory import SkillMemory

        self.memory = SkillMemory(home, model=model)
        if settle is not None:
            settle(self.memory.store)
        text, examples = manual
        self.memory.add_manual(AGENT_MANUAL, text, examples=examples, capture=False)

    def ask(self, system: str, turns: list, tools: bool) -> dict:
        from ..core.answer import AnswerOptions

        chat = [("system", system), *((t["role"], t["content"]) for t in turns)]
        options = AnswerOptions(max_tokens=MAX_TOKENS, format=output_format(TOOLS) if tools else None)
        started = time.perf_counter()
        answer = self.memory.answer(chat, options)
        seconds = time.perf_counter() - started
        note = answer.note
        return {"seconds": seconds, "prompt_tokens": answer.end.prompt_tokens, "cache_n": note.cache_n,
                "reused_from": note.reused_from, "decision": note.decision, "block": note.block_name or ""}

    def close(self) -> None:
        self.memory.close()


class LlamaSystem:
    """llama-cpp-python's ``Llama`` with the engine's settings; the manual pasted after the system prompt."""

    name = "llama-cpp-python"

    def __init__(self, model: Optional[str], manual_text: str) -> None:
        import llama_cpp
        import llama_cpp.llama as high_level

        from ..engine.models import resolve_model, settings_for
        from ..engine.native import ggml_type

        settings = settings_for(model)
        defaults = high_level.llama_cpp.llama_model_default_params

        def without_extra_buffers():  # as the engine: no AMX or repacked weight buffers
            params = defaults()
            params.use_extra_bufts = False
            return params

        high_level.llama_cpp.llama_model_default_params = without_extra_buffers
        try:
            self.llama = llama_cpp.Llama(
                model_path=str(resolve_model(model)[1]), n_ctx=settings.n_ctx, n_batch=settings.n_batch,
                n_ubatch=settings.n_ubatch, n_threads=settings.n_threads, n_threads_batch=settings.n_threads,
                flash_attn=settings.flash_attn, type_k=ggml_type(settings.type_k), type_v=ggml_type(settings.type_v),
                verbose=False,
            )
        finally:
            high_level.llama_cpp.llama_model_default_params = defaults
        self.manual = manual_text

    def ask(self, system: str, turns: list, tools: bool) -> dict:
        import llama_cpp

        turns, grammar = list(turns), None
        started = time.perf_counter()
        if tools:  # the tools described at the end of the app's system prompt and the same grammar, as skillgraft
            fmt = output_format(TOOLS)
            system = f"{system}\n\n{fmt.instructions()}"
            grammar = llama_cpp.LlamaGrammar.from_string(fmt.grammar, verbose=False)
        messages = [{"role": "system", "content": system}, {"role": "system", "content": self.manual}, *turns]
        held = self.llama.input_ids[: self.llama.n_tokens].tolist()
        reply = self.llama.create_chat_completion(messages, max_tokens=MAX_TOKENS, temperature=0.0, grammar=grammar)
        seconds = time.perf_counter() - started
        prompt_tokens = int(reply["usage"]["prompt_tokens"])
        # Llama keeps the longest common prefix of what it held (and re-evaluates the last prompt token)
        kept = min(common_prefix(held, self.llama.input_ids[:prompt_tokens].tolist()), prompt_tokens - 1)
        return {"seconds": seconds, "prompt_tokens": prompt_tokens, "cache_n": kept, "reused_from": "context",
                "decision": "pasted", "block": AGENT_MANUAL}

    def close(self) -> None:
        self.llama.close()


def _scenarios(system, texts: Texts, record: Callable[[dict], None]) -> Iterator[str]:
    """Every scenario on ``system``, in order, yielding once each is done."""

    def ask(scenario: str, round_: int, turns: list, tools: bool = False) -> None:
        result = system.ask(texts.agent, turns, tools)
        record({"system": system.name, "scenario": scenario, "round": round_, "question": turns[-1]["content"], **result})

    for i, question in enumerate(texts.agent_questions):
        ask("agent", i + 1, [_user(question)])
    yield "agent"
    turns: list = []
    for i, (question, reply) in enumerate(CONVERSATION):
        turns.append(_user(question))
        ask("conversation", i + 1, list(turns))
        turns.append({"role": "assistant", "content": reply})
    yield "conversation"
    for i, question in enumerate(LOOP_QUESTIONS):
        first = [_user(question)]
        ask("tool loop", 2 * i + 1, first, tools=True)
        ask("tool loop", 2 * i + 2, [*first, {"role": "assistant", "content": tool_calls_turn([LOOP_CALL])},
                                      _user(tool_result_turn(LOOP_CALL[0], LOOP_RESULT))], tools=True)
    yield "tool loop"


def requests_per_system(quick: bool = False) -> int:
    return len(Texts(quick).agent_questions) + len(CONVERSATION) + 2 * len(LOOP_QUESTIONS)


def bench_agent_local(model: Optional[str] = None, progress: Progress = None, quick: bool = False) -> dict:
    """Time per request, :class:`SkillMemory` in-process against ``Llama`` (module docstring).
    Returns ``{"rows", "summary", "requests", ...}``; ``rows`` name ``llama-cpp-python`` as the
    other system (the ``llama_server_*`` keys of the server benchmark's rows)."""
    from ..config import default_model
    from ..engine.models import settings_for

    model = model or default_model()
    texts = Texts(quick)
    manual = texts.manuals[AGENT_MANUAL]
    records, record = recorder(2 * requests_per_system(quick) + 2 * len(conversations()) * 2 * TURNS, progress)
    started = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="skillgraft-bench-local-"))
    try:
        ours = MemorySystem(workdir / "store", model, manual, settle=texts.settle_threshold)
        try:
            theirs = LlamaSystem(model, manual[0])
            try:
                take_turns([(_scenarios(ours, texts, record), 0.0), (_scenarios(theirs, texts, record), 0.0)])
            finally:
                theirs.close()
        finally:
            ours.close()
        policies = bench_policies(workdir, model, texts, record)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    settings = settings_for(model)
    report = _report([r for r in records if r["scenario"] != "topic change"])
    report["conversation_policy"] = policies
    report.update(kind="agent-in-process", model=model, quick=quick, n_threads=settings.n_threads,
                  n_ctx=settings.n_ctx, max_tokens=MAX_TOKENS, wall_s=round(time.perf_counter() - started, 2),
                  requests=records, other="llama-cpp-python")
    return report


def _report(records: list[dict]) -> dict:
    row = partial(compared_row, records, "llama-cpp-python")

    later = set(range(2, len(data.AGENT_QUESTIONS) + 1))
    more = range(2, 1 + max((r["round"] for r in records if r["scenario"] == "agent"), default=1))
    loop_second = {2 * i + 2 for i in range(len(LOOP_QUESTIONS))}
    rows = [row("agent", "first request", {1}), row("agent", "later requests", later),
            row("agent", f"later requests, rounds 2-{more.stop - 1}", more),
            row("conversation", f"{len(CONVERSATION)} turns, total", total=True), row("conversation", "per turn"),
            row("tool loop", "question (first call)", set(range(1, 2 * len(LOOP_QUESTIONS) + 1)) - loop_second),
            row("tool loop", "after the tool (second call)", loop_second)]
    by = {(r["scenario"], r["measure"]): r for r in rows}
    ours = [r for r in records if r["system"] == "skillgraft"]
    summary = {
        "agent_later_ratio": by["agent", "later requests"]["ratio"],
        "agent_later_all_ratio": by["agent", f"later requests, rounds 2-{more.stop - 1}"]["ratio"],
        "conversation_total_ratio": by["conversation", f"{len(CONVERSATION)} turns, total"]["ratio"],
        "tool_loop_second_call_ratio": by["tool loop", "after the tool (second call)"]["ratio"],
        "reused_from": {scenario: dict(Counter(r["reused_from"] or "none" for r in ours if r["scenario"] == scenario))
                        for scenario in ("agent", "conversation", "tool loop")},
        "grafts": sum(r["decision"] == "graft" for r in ours), "requests": len(ours),
    }
    return {"rows": rows, "summary": summary}

