"""``bench load``'s script and maths, no server: the agents' chats, streamed answers read off the
wire, one row per load, the ratios and the bar."""

from __future__ import annotations

import json

import httpx
import pytest

from skillgraft.bench import agent_data as data
from skillgraft.bench.load import plan_sizes
from skillgraft.bench.load_rows import compare, load_row, stream_chat
from skillgraft.bench.load_script import NEW, SEEN, agents, chat, manuals


def test_every_agent_has_its_own_prompt_tools_and_a_mix_of_seen_and_new_skills():
    script = agents(8, 3)
    assert len({a.prompt for a in script}) == 8
    assert all(a.tools and all(t["type"] == "function" for t in a.tools) for a in script)
    for agent in script:
        seen = agent.warm_up[0]
        assert seen in SEEN and [s for s, _ in agent.turns] == [seen, agent.turns[1][0], seen]
        assert agent.turns[1][0] in NEW
        assert len({q for _, q in agent.turns} | {agent.warm_up[1]}) == 4  # no question asked twice
    assert agents(8, 3) == script  # the same script for every system


def test_the_chat_pastes_each_skill_once_before_the_turn_first_needing_it():
    agent = agents(1, 3)[0]
    skills = manuals(False)
    plain = chat(agent, list(agent.turns))
    roles = [m["role"] for m in plain["messages"]]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"] and plain["tools"] == list(agent.tools)
    pasted = chat(agent, list(agent.turns), paste=skills)["messages"]
    texts = [m["content"] for m in pasted if m["role"] == "system"][1:]
    assert texts == [skills[agent.turns[0][0]][0], skills[agent.turns[1][0]][0]]
    assert pasted[1]["content"] == skills[agent.turns[0][0]][0] and pasted[2]["role"] == "user"
    tools_pasted = chat(agent, list(agent.turns), tools_pasted=True)
    assert "tools" not in tools_pasted and tools_pasted["messages"][0]["content"].startswith(agent.prompt)
    assert len(tools_pasted["messages"][0]["content"]) > len(agent.prompt)


def test_quick_skills_are_the_first_lines():
    quick = manuals(True)
    assert set(quick) == set(data.MANUALS)
    assert all(len(text.splitlines()) <= 3 for text, _ in quick.values())


def _client(lines: list[str], status: int = 200, headers=None):
    def handler(request):
        assert json.loads(request.content)["stream"] is True
        return httpx.Response(status, headers=headers or {}, content="".join(lines).encode())

    return httpx.Client(base_url="http://test", transport=httpx.MockTransport(handler))


def _event(body: dict) -> str:
    return f"data: {json.dumps(body)}\n\n"


def test_a_streamed_answer_is_read_to_its_first_token_and_its_usage():
    lines = [_event({"choices": [{"delta": {"role": "assistant", "content": ""}}]}),
             _event({"choices": [{"delta": {"content": "Run"}}]}), _event({"choices": [{"delta": {"content": " it"}}]}),
             _event({"choices": [], "usage": {"completion_tokens": 7, "prompt_tokens": 90},
                     "timings": {"cache_n": 80}}),
             "data: [DONE]\n\n"]
    record = stream_chat(_client(lines, headers={"x-skillgraft-decision": "graft"}), {"messages": []})
    assert record["error"] is None and record["decision"] == "graft"
    assert record["completion_tokens"] == 7 and record["prompt_tokens"] == 90 and record["cache_n"] == 80
    assert 0 <= record["first_event_s"] <= record["ttft_s"] <= record["seconds"]


def test_tool_calls_count_as_first_tokens_and_missing_usage_counts_the_pieces():
    lines = [_event({"choices": [{"delta": {"tool_calls": [{"index": 0}]}}]}),
             _event({"choices": [{"delta": {"content": "x"}}]}), "data: [DONE]\n\n"]
    record = stream_chat(_client(lines), {"messages": []})
    assert record["error"] is None and record["completion_tokens"] == 2 and record["ttft_s"] is not None


def test_an_answer_without_tokens_has_its_end_as_first_token():
    record = stream_chat(_client([_event({"choices": [{"delta": {}, "finish_reason": "length"}]}), "data: [DONE]\n\n"]),
                         {"messages": []})
    assert record["error"] is None and record["ttft_s"] == record["seconds"]


@pytest.mark.parametrize("lines, status, expected", [
    ([_event({"error": {"message": "slot busy"}})], 200, "error event"),
    (["busy"], 503, "HTTP 503"),
])
def test_errors_are_recorded_not_raised(lines, status, expected):
    record = stream_chat(_client(lines, status=status), {"messages": []})
    assert record["error"].startswith(expected) and record["seconds"] is None


def test_a_refused_connection_is_an_error():
    def handler(request):
        raise httpx.ConnectError("refused")

    client = httpx.Client(base_url="http://test", transport=httpx.MockTransport(handler))
    assert stream_chat(client, {"messages": []})["error"].startswith("ConnectError")


def _record(ttft, tokens=16, error=None, decision="graft"):
    return {"ttft_s": ttft, "completion_tokens": tokens, "prompt_tokens": 100, "error": error, "decision": decision}


def test_a_row_counts_answered_requests_tokens_and_percentiles():
    records = [_record(t / 10) for t in range(1, 21)] + [_record(None, error="HTTP 503: busy")] * 2
    row = load_row(records, 4.0, model="m", system="s", slots=1, agents=2, turns=3)
    assert row["requests"] == 22 and row["answered"] == 20 and row["errors"] == 2
    assert row["error_messages"] == ["HTTP 503: busy"]
    assert row["requests_per_s"] == 5.0 and row["completion_tokens"] == 320 and row["tokens_per_s"] == 80.0
    assert row["ttft_p50_s"] == 1.1 and row["ttft_p95_s"] == 1.9  # nearest rank over the 20 answered
    assert row["decisions"] == {"graft": 20} and row["prompt_tokens"] == 2000


def test_an_empty_load_has_no_percentiles():
    row = load_row([], 0.0, model="m", system="s", slots=1, agents=1, turns=1)
    assert row["ttft_p50_s"] is None and row["requests_per_s"] is None and row["errors"] == 0


def _row(rps, p95, errors=0, system="skillgraft"):
    return {"model": "m", "slots": 2, "agents": 8, "turns": 3, "system": system, "requests_per_s": rps,
            "tokens_per_s": rps * 16, "ttft_p50_s": p95 / 2, "ttft_p95_s": p95, "errors": errors}


@pytest.mark.parametrize("ours, met", [(_row(2.0, 1.0), True), (_row(2.0, 1.5), True), (_row(1.9, 1.0), False),
                                       (_row(2.0, 1.6), False), (_row(3.0, 1.0, errors=1), False)])
def test_the_bar_is_throughput_at_least_and_p95_at_most_with_no_errors(ours, met):
    comparison = compare(ours, _row(2.0, 1.5, system="llama-server"))
    assert comparison["met"] is met and comparison["against"] == "llama-server"
    assert comparison["requests_per_s_ratio"] == round(ours["requests_per_s"] / 2.0, 4)
    assert comparison["ttft_p95_ratio"] == round(ours["ttft_p95_s"] / 1.5, 4)


def test_sizes_default_to_k_2k_and_4k():
    assert plan_sizes([1, 2], None) == [(1, 1), (1, 2), (1, 4), (2, 2), (2, 4), (2, 8)]
    assert plan_sizes([2], [3]) == [(2, 3)]


def test_the_table_shows_each_row_its_errors_and_the_ratios():
    from skillgraft.cli.bench_render import _render_load

    row = {**_row(2.0, 1.5), "wall_s": 12.0, "error_messages": ["HTTP 503: busy"], "errors": 1, "ttft_p95_s": None}
    text = _render_load({"rows": [row], "comparisons": [compare(_row(2.0, 1.0), _row(2.0, 1.5, system="llama-server"))],
                         "load_average_before": [0.1, 0.2, 0.3], "load_average_after": [0.4, 0.5, 0.6]})
    assert "skillgraft" in text and "HTTP 503: busy" in text and "req/s 1.000" in text and "p95 0.667" in text
    assert "below the bar" not in text and "[0.4, 0.5, 0.6]" in text
