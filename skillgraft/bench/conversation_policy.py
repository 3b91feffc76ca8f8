"""``skillgraft bench agent --in-process`` also measures what a conversation should do when a
later user turn routes to another skill: keep the skills it holds and let the new one enter
after the turns so far (the conversation is continued), or switch to the routed block alone in
front of the conversation (the conversation is prefilled again behind it).

Conversations of :data:`TURNS` user turns on one of the server benchmark's manuals, then as many
on another (fixed assistant replies), through one :class:`~skillgraft.memory.SkillMemory` per
policy over stores holding the same six manuals; per policy the time of every turn, how often
the conversation kept or switched its block and how many turns were answered behind the skill
they were written for.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Callable, Optional

from . import agent_data as data
from .agent import MAX_TOKENS
from .agent_texts import Texts

TURNS = 3
PAIRS = (("postgres-backup", "disk-full"), ("tls-renewal", "dns-change"), ("k8s-crashloop", "ssh-access"))
REPLY = "Understood. Anything else?"


def conversations() -> list[list[tuple[str, str]]]:
    """Each conversation's user turns as ``(question, the manual it is about)``."""
    return [[(data.SKILL_QUESTIONS[name][i], name) for name in pair for i in range(TURNS)] for pair in PAIRS]


def bench_policies(workdir: Path, model: Optional[str], texts: Texts, record: Callable[[dict], None]) -> dict:
    """Every conversation under ``keep`` and under ``switch``; one row per policy."""
    from ..core.answer import AnswerOptions
    from ..memory import SkillMemory

    rows = []
    for policy in ("keep", "switch"):
        memory = SkillMemory(workdir / f"policy-{policy}", model=model, conversations=policy)
        try:
            for name in {name for pair in PAIRS for name in pair}:
                text, examples = texts.manuals[name]
                memory.add_manual(name, text, examples=examples)
            seconds, at_change, outcomes, right = [], [], {"entered": 0, "kept": 0, "switched": 0}, 0
            for conversation in conversations():
                chat = [("system", texts.agent)]
                for turn, (question, expected) in enumerate(conversation):
                    chat.append(("user", question))
                    started = time.perf_counter()
                    answer = memory.answer(chat, AnswerOptions(max_tokens=MAX_TOKENS))
                    took = time.perf_counter() - started
                    chat.append(("assistant", REPLY))
                    note = answer.note
                    seconds.append(took)
                    at_change += [took] if turn == TURNS else []
                    if note.conversation:
                        outcomes[note.conversation] += 1
                    right += note.block_name == expected
                    record({"system": f"skillgraft ({policy})", "scenario": "topic change", "round": turn + 1,
                            "question": question, "expected": expected, "seconds": took, "decision": note.decision,
                            "block": note.block_name or "", "conversation": note.conversation, "cache_n": note.cache_n,
                            "reused_from": note.reused_from})
        finally:
            memory.close()
        rows.append({"policy": policy, "turns": len(seconds), "total_s": round(sum(seconds), 3),
                     "median_turn_s": round(statistics.median(seconds), 4),
                     "first_turn_on_the_new_topic_s": round(statistics.median(at_change), 4),
                     "entered": outcomes["entered"], "kept": outcomes["kept"], "switched": outcomes["switched"],
                     "behind_the_expected_skill": right})
    return {"rows": rows, "turns_per_topic": TURNS, "pairs": [list(pair) for pair in PAIRS]}
