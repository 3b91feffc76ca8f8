"""``bench placement``'s shapes: the agent's tools as OpenAI's tools parameter, and a skill pasted
for llama-server where a user pastes it (once, before the turn that first needs it)."""

from __future__ import annotations

from skillgraft.bench import agent_data as data
from skillgraft.bench.agent_rows import take_turns
from skillgraft.bench.placement import (
    CONVERSATION, TOOLS_PASTED, _Asker, _rows, _scenarios, agent_prompt, agent_tools, drops_tools,
)
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


def test_the_systems_take_turns_request_by_request():
    manuals = {name: (f"manual of {name}", []) for name in data.SKILL_QUESTIONS}
    rows: list = []
    runs = [(_scenarios(_Asker(Posted(name), manuals, agent_tools()), "APP", rows.append, captured=False), 0.0)
            for name in ("skillgraft", "llama-server")]
    take_turns(runs)
    systems = [r["system"] for r in rows]
    assert all(a != b for a, b in zip(systems[::2], systems[1::2]))  # each request, then the other system's same one
    assert [r["question"] for r in rows[::2]] == [r["question"] for r in rows[1::2]]


def test_tools_pasted_where_the_gateway_places_them_when_the_server_drops_the_parameter():
    manuals = {name: (f"manual of {name}", []) for name in data.SKILL_QUESTIONS}
    pasted = Posted("llama-server")
    asker = _Asker(pasted, manuals, agent_tools(), tools_pasted=True)
    assert asker.name == TOOLS_PASTED
    rows: list = []
    for _ in _scenarios(asker, "APP", rows.append, captured=False):
        pass
    body = pasted.bodies[0]
    assert "tools" not in body
    tools_text = output_format([Tool.from_openai(t) for t in agent_tools()]).instructions()
    assert body["messages"][0] == {"role": "system", "content": f"APP\n\n{tools_text}"}
    assert body["messages"][1]["content"].startswith("manual of ")  # the skill pasted after the app's prompt
    assert {r["system"] for r in rows} == {TOOLS_PASTED}


def test_rows_against_the_tools_pasted_say_so_and_pair_each_request():
    records = [{"system": system, "scenario": "first sighting", "round": 1, "seconds": s}
               for pair in ((1.0, 2.0, 0.5), (3.0, 2.0, 6.0)) for system, s in zip(("skillgraft", "llama-server", TOOLS_PASTED), pair)]
    table = _rows(records)
    assert [r["measure"] for r in table] == ["six skills, one question each",
                                              "six skills, one question each (tools pasted for llama-server)"]
    assert table[0]["ratio"] == 1.0 and table[0]["paired_ratio"] == 1.0  # medians 2/2; pairs 0.5 and 1.5
    assert table[1]["paired_ratio"] == 1.25  # pairs 2.0 and 0.5


class Templates:
    """A llama-server's /apply-template: renders the tools or not."""

    name = "llama-server"

    def __init__(self, renders_tools):
        self.renders_tools, self.client = renders_tools, self

    def post(self, path, json):
        assert path == "/apply-template"
        self.prompt = "s u" + (" TOOLS" if self.renders_tools and "tools" in json else "")
        return self

    is_success = True

    def json(self):
        return {"prompt": self.prompt}


def test_a_template_that_renders_nothing_of_the_tools_is_found():
    assert drops_tools(Templates(False)) and not drops_tools(Templates(True))
