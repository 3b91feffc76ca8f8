"""Streamed requests and the rows of ``skillgraft bench load``: one row per system and load
(requests and tokens a second, time to first token p50/p95, errors) and one comparison per
system against llama-server."""

from __future__ import annotations

import json
import time
from typing import Optional

from .serve import _percentile

__all__ = ["stream_chat", "load_row", "compare", "MAX_ERRORS_SHOWN"]

MAX_ERRORS_SHOWN = 3


def stream_chat(client, body: dict) -> dict:
    """POST ``body`` streamed to ``client``'s ``/v1/chat/completions``; returns the request's
    record: ``ttft_s`` (to the first content or tool-call token; an answer with neither: to its
    end), ``first_event_s`` (to the first event of any kind), ``seconds`` (to the end),
    ``completion_tokens``, ``prompt_tokens``, ``cache_n``, ``decision`` and ``error`` (None,
    or what went wrong)."""
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    record = {"ttft_s": None, "first_event_s": None, "seconds": None, "completion_tokens": 0, "prompt_tokens": None,
              "cache_n": None, "decision": None, "error": None}
    pieces = 0
    started = time.perf_counter()
    try:
        with client.stream("POST", "/v1/chat/completions", json=body) as response:
            if response.status_code != 200:
                response.read()
                record["error"] = f"HTTP {response.status_code}: {response.text[:200]}"
                return record
            record["decision"] = response.headers.get("x-skillgraft-decision")
            for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                now = time.perf_counter() - started
                event = json.loads(data)
                if record["first_event_s"] is None:
                    record["first_event_s"] = now
                if event.get("error"):
                    record["error"] = f"error event: {json.dumps(event['error'])[:200]}"
                    return record
                for choice in event.get("choices") or ():
                    delta = choice.get("delta") or {}
                    if delta.get("content") or delta.get("tool_calls"):
                        pieces += 1
                        if record["ttft_s"] is None:
                            record["ttft_s"] = now
                usage = event.get("usage")
                if usage:
                    record["completion_tokens"] = usage.get("completion_tokens", 0)
                    record["prompt_tokens"] = usage.get("prompt_tokens")
                timings = event.get("timings") or {}
                note = event.get("skillgraft") or {}
                if "cache_n" in timings or "cache_n" in note:
                    record["cache_n"] = note.get("cache_n", timings.get("cache_n"))
    except Exception as exc:  # noqa: BLE001 - a load test counts every failure, whatever raised it
        record["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        return record
    record["seconds"] = time.perf_counter() - started
    if record["ttft_s"] is None:
        record["ttft_s"] = record["seconds"]
    if not record["completion_tokens"]:
        record["completion_tokens"] = pieces
    return record


def load_row(records: list[dict], wall_s: float, **labels) -> dict:
    """The row of one load: ``labels`` (model, system, slots, agents, ...) and the measures of
    ``records`` (one per timed request) over ``wall_s`` seconds."""
    answered = [r for r in records if r["error"] is None]
    ttft = [r["ttft_s"] for r in answered]
    tokens = sum(r["completion_tokens"] for r in answered)
    errors = [r["error"] for r in records if r["error"] is not None]
    decisions: dict = {}
    for r in answered:
        if r.get("decision"):
            decisions[r["decision"]] = decisions.get(r["decision"], 0) + 1
    return {
        **labels, "requests": len(records), "answered": len(answered), "wall_s": round(wall_s, 3),
        "requests_per_s": round(len(answered) / wall_s, 4) if wall_s > 0 else None,
        "completion_tokens": tokens, "tokens_per_s": round(tokens / wall_s, 3) if wall_s > 0 else None,
        "ttft_p50_s": _percentile(ttft, 0.5), "ttft_p95_s": _percentile(ttft, 0.95),
        "prompt_tokens": sum(r["prompt_tokens"] or 0 for r in answered),
        "errors": len(errors), "error_messages": list(dict.fromkeys(errors))[:MAX_ERRORS_SHOWN],
        "decisions": decisions,
    }


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return round(a / b, 4) if a is not None and b else None


def compare(ours: dict, theirs: dict) -> dict:
    """``ours`` against ``theirs`` (rows of the same model, slots and agents): throughput and
    TTFT ratios, and whether ours met the bar (throughput at least theirs, TTFT p95 at or below
    theirs, no errors)."""
    ratios = {
        "requests_per_s_ratio": _ratio(ours["requests_per_s"], theirs["requests_per_s"]),
        "tokens_per_s_ratio": _ratio(ours["tokens_per_s"], theirs["tokens_per_s"]),
        "ttft_p50_ratio": _ratio(ours["ttft_p50_s"], theirs["ttft_p50_s"]),
        "ttft_p95_ratio": _ratio(ours["ttft_p95_s"], theirs["ttft_p95_s"]),
    }
    met = (ours["errors"] == 0 and ratios["requests_per_s_ratio"] is not None and ratios["requests_per_s_ratio"] >= 1
           and ratios["ttft_p95_ratio"] is not None and ratios["ttft_p95_ratio"] <= 1)
    return {key: ours[key] for key in ("model", "slots", "agents", "turns")} | {
        "system": ours["system"], "against": theirs["system"], **ratios, "met": met}
