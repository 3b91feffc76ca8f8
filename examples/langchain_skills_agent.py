"""A LangChain agent with tools over a folder of Agent Skills, on the embedded model.

A temporary store imports real Agent Skills folders (tests/data/agent_skills; an import runs
no model: each skill is stored as text). The agent is LangChain's ``create_agent`` with
``ChatSkillGraft`` as its model, ``SkillGraftMiddleware`` asking the memory before each model
call, and two real tools: a calculator and a reader of this repository's files. For each
question the memory routes to a skill (``graft``: the skill is placed after the agent's
system prompt and tools, its KV cells made on first use and restored after) or abstains.

The same agent then answers the same questions with the memory's routing off
(``ChatSkillGraft(route=False)``, no middleware), the skill the memory chose pasted into its
system prompt by hand, as an agent without the memory would carry it. The summary sets the
two side by side: decision, skills placed, prompt tokens prefilled and time per question.

Run: .venv/bin/python examples/langchain_skills_agent.py [--quick]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from langchain.agents import create_agent
from langchain.agents.middleware import ModelCallLimitMiddleware
from langchain_core.tools import tool
from arithmetic import evaluate  # examples/arithmetic.py
from skillgraft import SkillMemory

from langchain_skillgraft import ChatSkillGraft, SkillGraftMiddleware

REPO = Path(__file__).resolve().parent.parent
SKILLS = REPO / "tests" / "data" / "agent_skills"
SKILL_NAMES = ["git-commit-messages", "regex-crafting", "spreadsheet-formulas", "release-notes", "python-packaging"]
SYSTEM = "You are the team's engineering assistant. Answer briefly. Use a tool when it helps."
QUESTIONS = [
    "I need a regex pattern that pulls order numbers like ORD-2026-004512 out of email bodies.",
    "Reviewer says my commit subject is too long and in past tense, can you rewrite it?",
    "Use the calculator: what is 1250 * 18 / 100?",
    "What is the capital of France?",  # no skill covers it: abstain
    "My python re.sub is replacing way too much, I wanted only the text between the first pair of quotes.",
    "How do I phrase a breaking change in a conventional commits style repo?",  # the commit skill again
]
QUICK = [0, 3, 4]  # a skill, an abstain, the same skill again
MAX_TOKENS = 48
MODEL_CALLS = 2  # per question: a tool call, then an answer from its result


@tool
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression such as 12 * (3 + 4)."""
    return evaluate(expression)


@tool
def read_file(path: str) -> str:
    """Read a text file of the repository by its relative path (first 800 characters)."""
    target = (REPO / path).resolve()
    if REPO not in target.parents or not target.is_file():
        return f"error: no file {path!r} in the repository"
    return target.read_text(errors="replace")[:800]


def skill_text(name: str) -> str:
    text = (SKILLS / name / "SKILL.md").read_text()
    return text.split("---", 2)[2].strip() if text.startswith("---") else text


def run(agent, question: str) -> dict:
    """One question through the agent: its time, the tokens prefilled, the memory's notes."""
    started = time.perf_counter()
    result = agent.invoke({"messages": [{"role": "user", "content": question}]})
    seconds = time.perf_counter() - started
    new = result["messages"][1:]
    ai = [m for m in new if m.type == "ai" and m.response_metadata.get("skillgraft")]
    notes = [m.response_metadata.get("skillgraft") or {} for m in ai]
    return {
        "seconds": seconds,
        "prefilled": sum((m.usage_metadata or {}).get("input_tokens", 0) for m in ai),
        "restored": sum(int(n.get("restored_tokens") or 0) for n in notes),
        "decision": notes[0].get("decision") if notes else None,
        "skill": notes[0].get("block_name") if notes else None,
        "skills": sorted({s["block_name"] for n in notes for s in (n.get("skills") or [])}),
        "tools": [m.name for m in new if m.type == "tool"],
        "answer": " ".join(str(ai[-1].content).split()) if ai else "",
        "calls": len(ai),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="three skills, three questions")
    args = parser.parse_args()
    names = SKILL_NAMES[:3] if args.quick else SKILL_NAMES
    questions = [QUESTIONS[i] for i in QUICK] if args.quick else QUESTIONS

    with tempfile.TemporaryDirectory(prefix="skillgraft-lc-skills-") as tmp:
        folder = Path(tmp) / "skills"
        for name in names:
            shutil.copytree(SKILLS / name, folder / name)
        print("loading the embedded model and the embedder ...", flush=True)
        with SkillMemory(Path(tmp) / "home") as memory:
            report = memory.skills.import_folders([folder])
            print(f"imported {len(report.imported)} skills: {', '.join(s.name for s in report.imported)}\n", flush=True)
            tools = [calculator, read_file]

            with_memory = create_agent(model=ChatSkillGraft(memory=memory, max_tokens=MAX_TOKENS), tools=tools,
                                       middleware=[ModelCallLimitMiddleware(run_limit=MODEL_CALLS), SkillGraftMiddleware(memory)],
                                       system_prompt=SYSTEM)
            rows = []
            print("== with the memory (routing on) ==", flush=True)
            for q in questions:
                r = run(with_memory, q)
                rows.append(r)
                print(f"Q: {q}\n   {r['decision']} -> {r['skill']}  skills placed {r['skills'] or '-'}  "
                      f"tools {r['tools'] or '-'}\n   A: {r['answer'][:100]!r}", flush=True)

            print("\n== the same agent, routing off, the chosen skill pasted into its system prompt ==", flush=True)
            plain_model = ChatSkillGraft(memory=memory, max_tokens=MAX_TOKENS, route=False)
            for q, r in zip(questions, rows):
                pasted = [s for s in r["skills"] if (SKILLS / s).is_dir()]
                system = "\n\n".join([SYSTEM, *(skill_text(s) for s in pasted)])
                plain = create_agent(model=plain_model, tools=tools, system_prompt=system,
                                     middleware=[ModelCallLimitMiddleware(run_limit=MODEL_CALLS)])
                r["plain"] = run(plain, q)
                print(f"Q: {q}\n   pasted {pasted or '-'}  tools {r['plain']['tools'] or '-'}\n"
                      f"   A: {r['plain']['answer'][:100]!r}", flush=True)

    print("\n== per question: with the memory | routing off, skill pasted ==")
    print(f"  {'decision':8} {'skills placed':22} {'prefilled':>9} {'restored':>8} {'seconds':>7} | "
          f"{'prefilled':>9} {'seconds':>7}  question")
    for q, r in zip(questions, rows):
        p = r["plain"]
        print(f"  {str(r['decision']):8} {','.join(r['skills'])[:22] or '-':22} {r['prefilled']:9} {r['restored']:8} "
              f"{r['seconds']:7.2f} | {p['prefilled']:9} {p['seconds']:7.2f}  {q[:48]}")
    m_s, p_s = sum(r["seconds"] for r in rows), sum(r["plain"]["seconds"] for r in rows)
    print("\n== summary ==")
    print(f"questions: {len(rows)}, decisions: {', '.join(str(r['decision']) for r in rows)}")
    print(f"skills placed: {', '.join(sorted({s for r in rows for s in r['skills']})) or 'none'}")
    print(f"prompt tokens prefilled: memory {sum(r['prefilled'] for r in rows)}, "
          f"routing off {sum(r['plain']['prefilled'] for r in rows)}")
    print(f"time to answer: memory {m_s:.2f} s, routing off {p_s:.2f} s ({p_s / m_s:.2f}x)")


if __name__ == "__main__":
    main()
