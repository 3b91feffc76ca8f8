"""The test session's store: three git manuals and one verified solution, built once per process.

The standard suites configure models through properties, which cannot use fixtures, so
the store lives in a temp folder made on first use and removed by the session fixture in
``conftest.py``. Models and retrievers reach it by ``home``, sharing one loaded memory.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

GIT_MANUAL = (
    "Skill manual: squashing commits with git. Run git rebase -i HEAD~N, keep the first line as pick "
    "and change the others to squash. Push with git push --force-with-lease."
)
GIT_EXAMPLES = ["how do I squash my last commits?", "combine commits into one"]
# Neighbours of the squash manual: a git question reaches all three (the retriever's k).
OTHER_GIT_MANUALS = {
    "git-amend": (
        "Skill manual: fixing the last commit with git. Stage the change with git add, then run "
        "git commit --amend --no-edit to fold it into the last commit.",
        ["how do I change my last commit?"],
    ),
    "git-undo": (
        "Skill manual: undoing commits with git. Run git reset --soft HEAD~N to undo the last N "
        "commits and keep their changes staged.",
        ["how do I undo my last commits?"],
    ),
}
SOLVED_QUESTION = "What is 17 * 23?"
SOLVED_ANSWER = "391"
GRAFT_QUESTION = "How do I squash my last three commits into one?"
ABSTAIN_QUESTION = "What is the capital of France?"
# Routes to the 17 * 23 solution, which SmolLM2 then copies: "17 * 24 = 391".
NEAR_MISS_QUESTION = "What is 17 * 24?"
SYSTEM_PROMPT = "You are a terse assistant"
MAX_TOKENS = 16


@functools.lru_cache(maxsize=None)
def store_home() -> Path:
    """The folder of the stocked store (built on the first call)."""
    from langchain_skillgraft import open_memory

    home = Path(tempfile.mkdtemp(prefix="langchain-skillgraft-tests-"))
    memory = open_memory(home)
    memory.add_manual("git-squash", GIT_MANUAL, examples=GIT_EXAMPLES)
    for name, (text, examples) in OTHER_GIT_MANUALS.items():
        memory.add_manual(name, text, examples=examples)
    memory.add_solution(SOLVED_QUESTION, SOLVED_ANSWER, method="print(17 * 23)", verifier="python")
    return home


def built() -> bool:
    return store_home.cache_info().currsize > 0
