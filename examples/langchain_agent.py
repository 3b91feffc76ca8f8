"""A LangChain agent with a skillgraft memory, on the embedded model.

A temporary store gets one skill manual and one verified solution. The agent's middleware
asks the memory before each model call; the questions below take the three paths:

- exact:   the verified question recurs, so its verified answer comes back without decoding;
- graft:   the manual is relevant, so its KV state is grafted and the model answers after it;
- abstain: nothing in memory is close, so the model answers plainly;
- a near miss: the question routes to the verified solution of another question, the grafted
  answer repeats that stored answer, so it is answered again plainly (``fallback``).

Run it with ``.venv/bin/python examples/langchain_agent.py``.
"""

from __future__ import annotations

import tempfile

from langchain.agents import create_agent
from skillgraft import SkillMemory

from langchain_skillgraft import ChatSkillGraft, SkillGraftMiddleware

MANUAL = (
    "Skill manual: squashing commits with git. Run git rebase -i HEAD~N, keep the first line as pick "
    "and change the others to squash. Push with git push --force-with-lease."
)
EXAMPLES = ["how do I squash my last commits?", "combine commits into one"]
QUESTIONS = [
    "What is 17 * 23?",  # recurs: exact
    "How do I squash my last 3 commits?",  # near the manual: graft
    "What is the capital of France?",  # out of domain: abstain
    "What is 17 * 24?",  # near the solution, another question: a fallback after the graft
]


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="skillgraft-langchain-") as home, SkillMemory(home) as memory:
        memory.add_manual("git-squash", MANUAL, examples=EXAMPLES)
        memory.add_solution("What is 17 * 23?", "391", method="print(17 * 23)", verifier="python")

        agent = create_agent(
            model=ChatSkillGraft(memory=memory, max_tokens=48),
            tools=[],
            middleware=[SkillGraftMiddleware(memory)],
        )
        for question in QUESTIONS:
            result = agent.invoke({"messages": [{"role": "user", "content": question}]})
            answer = result["messages"][-1]
            meta = answer.response_metadata["skillgraft"]
            print(f"Q: {question}")
            print(f"   decision={meta['decision']} block={meta['block_name']} score={meta['score']:.3f}")
            print(f"   {meta['reason']}")
            if (meta.get("gate") or {}).get("fell_back"):
                print(f"   gate: {meta['gate']['reason']}")
            print(f"A: {answer.text.strip()}\n")


if __name__ == "__main__":
    main()
