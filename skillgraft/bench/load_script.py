"""The request script of ``skillgraft bench load``: N agents, each with its own system prompt,
its own tools (the OpenAI ``tools`` parameter) and a few turns mixing skills the memory has
seen (asked once before the load) and new ones (first asked during it).

Every system is sent the same script. The gateway gets the app's chat and places the routed
skill itself; llama-server gets each skill pasted where a user pastes it, a system message
before the turn that first needs it (a skill pasted once stays), as in ``bench placement``.
Between turns the assistant's reply is a fixed line, so every system continues the same chat.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from . import agent_data as data
from ..core.tools import Tool, output_format
from .placement import agent_prompt, agent_tools

__all__ = ["Agent", "SEEN", "NEW", "agents", "chat", "manuals"]

SEEN = ("tide-rollback", "postgres-backup", "k8s-crashloop")  # asked once by each agent before the load
NEW = ("tls-renewal", "dns-change", "disk-full", "ssh-access")  # first asked during the load
QUESTIONS = {**data.SKILL_QUESTIONS, "tide-rollback": data.AGENT_QUESTIONS}
_APPS = (  # (rules, the tools it is given, by index into the agent's six)
    (None, (0, 1, 2, 3, 4, 5)),
    (data.RELEASE_RULES, data.APPS[2][0][1]),
    (data.ONCALL_RULES, data.APPS[1][0][1]),
    (data.SUPPORT_RULES, data.APPS[0][0][1]),
)


@dataclass(frozen=True)
class Agent:
    """One agent: its system prompt, tools, the warm-up question and its turns ``(skill, question)``."""

    index: int
    prompt: str
    tools: tuple
    warm_up: tuple[str, str]
    turns: tuple[tuple[str, str], ...]


def manuals(quick: bool) -> dict[str, tuple[str, list]]:
    """The skills in the memory: name -> (text, routing examples); quick: their first three lines."""
    return {name: (data.manual_text(name, lines=3) if quick else data.MANUALS[name][0], list(examples))
            for name, (_, examples) in data.MANUALS.items()}


def agents(n: int, turns: int, *, quick: bool = False) -> list[Agent]:
    """``n`` agents of ``turns`` turns: the first on its seen skill (warmed before the load),
    then new and seen skills in turn."""
    every = agent_tools()
    made = []
    for i in range(n):
        rules, chosen = _APPS[i % len(_APPS)]
        rules = agent_prompt() if rules is None else rules
        if quick:
            rules, chosen = rules.splitlines()[0] + "\n", chosen[:2]
        team, service = data.TEAMS[i % len(data.TEAMS)], data.SERVICES[i % len(data.SERVICES)]
        prompt = rules + (f"You work for the {team} team (agent {i + 1}); its main service is {service}, and its "
                          f"tickets go to the queue {team.upper()}-{100 + i}.\n")
        seen, plan = SEEN[i % len(SEEN)], []
        for t in range(turns):
            skill = seen if t % 2 == 0 else NEW[(i + t // 2) % len(NEW)]
            asked = sum(s == skill for s, _ in plan) + (1 if skill == seen else 0)
            plan.append((skill, QUESTIONS[skill][(i + asked) % len(QUESTIONS[skill])]))
        made.append(Agent(i, prompt, tuple(every[k] for k in chosen), (seen, QUESTIONS[seen][i % len(QUESTIONS[seen])]),
                          tuple(plan)))
    return made


def reply(skill: str) -> str:
    """The fixed assistant reply after a turn on ``skill``."""
    return "Following the runbook: " + data.manual_text(skill, lines=2).splitlines()[-1].strip()


def chat(agent: Agent, turns: list[tuple[str, str]], *, paste: Optional[dict] = None,
         tools_pasted: bool = False) -> dict:
    """The request body (without model and stream options) for ``turns`` of ``agent``'s chat:
    ``paste`` (name -> (text, examples)) pastes each skill before the turn first needing it;
    ``tools_pasted`` puts the tools' text at the end of the system prompt, where the gateway
    places them, instead of the ``tools`` parameter."""
    prompt = agent.prompt
    if tools_pasted:
        prompt = output_format([Tool.from_openai(t) for t in agent.tools]).lead([("system", prompt)])[0][1]
    messages, pasted = [{"role": "system", "content": prompt}], set()
    for n, (skill, question) in enumerate(turns):
        if paste is not None and skill not in pasted:
            messages.append({"role": "system", "content": paste[skill][0]})
            pasted.add(skill)
        messages.append({"role": "user", "content": question})
        if n < len(turns) - 1:
            messages.append({"role": "assistant", "content": reply(skill)})
    body: dict = {"messages": messages}
    if not tools_pasted:
        body["tools"] = list(agent.tools)
    return body
