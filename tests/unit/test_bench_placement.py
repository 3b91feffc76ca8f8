"""``bench placement``'s shapes: the agent's tools as OpenAI's tools parameter, and a skill pasted
for llama-server where a user pastes it (once, before the turn that first needs it)."""

from __future__ import annotations

from skillgraft.bench import agent_data as data
from skillgraft.bench.placement import CONVERSATION, _Asker, _rows, _scenarios, agent_prompt, agent_tools
from skillgraft.core.tools import Tool, output_format


class Posted:
    """A system's client: records each body, answers as the system would."""

    def __init__(self, name):
        self.name, self.model, self.bodies = name, "m", []
        self.client = self

    def post(self, path, json):
        self.bodies.append(json)
        return self

    is_success = True

    def json(self):
        note = {"cache_n": 3, "decision": "graft", "block_name": "x", "skills": [], "conversation": ""}
        return {"usage": {"prompt_tokens": 9}, **({"skillgraft": note} if self.name == "skillgraft" else {})}


def test_the_agents_tools_are_six_openai_tools_a_format_takes():
    tools = agent_tools()
    assert [t["function"]["name"] for t in tools] == ["search_runbooks", "service_status", "tail_logs", "deploy_history",
                                                      "restart_service", "open_incident"]
    assert tools[5]["function"]["parameters"]["properties"]["services"] == {"type": "array", "items": {"type": "string"}}
    assert tools[0]["function"]["parameters"]["required"] == ["query"]
    assert output_format([Tool.from_openai(t) for t in tools]).tools
    assert "You can call these tools" not in agent_prompt() and agent_prompt().startswith("You are Harbor")


def test_llama_server_gets_each_skill_pasted_once_before_the_turn_that_first_needs_it():
    manuals = {name: (f"manual of {name}", []) for name in data.SKILL_QUESTIONS}
    peer, gateway = Posted("llama-server"), Posted("skillgraft")
    rows: list = []
    for system in (peer, gateway):
        for _ in _scenarios(_Asker(system, manuals, agent_tools()), "APP", rows.append, captured=False):
            pass
    last = peer.bodies[-1]["messages"]
    pasted = [m["content"] for m in last if m["role"] == "system"]
    assert pasted == ["APP", *(f"manual of {name}" for name in dict.fromkeys(skill for skill, _, _ in CONVERSATION))]
    assert all("tools" in body and body["max_tokens"] == 1 for body in peer.bodies + gateway.bodies)
    assert [m["role"] for m in gateway.bodies[-1]["messages"]].count("system") == 1  # the gateway places them itself
    table = _rows(rows)  # no add_manual run here: its rows are left out
    assert [(r["scenario"], r["requests"]) for r in table] == [
        ("first sighting", 6), ("same skill again", 12), ("conversation", 1), ("conversation", 7), ("conversation", 7)]
    assert {(r["system"], r["cache_n"], r["decision"]) for r in rows} == {("skillgraft", 3, "graft"),
                                                                         ("llama-server", 0, "pasted")}
