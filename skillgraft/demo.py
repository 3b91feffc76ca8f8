"""``skillgraft demo``: the main job end to end on the embedded default model.

In a temporary store: deposit two skill manuals and a verified solution; route three
queries (one per decision, including an out-of-domain abstain); answer the recurring
question by lookup; graft a manual and check the logits byte for byte against a fresh
prefill; compare the manual's prefill cost with its restore cost.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from typing import Callable, Optional

from .config import default_model
from .errors import VerificationError
from .memory import SkillMemory

GIT_MANUAL = (
    "Skill manual: squashing commits with git. To squash the last N commits into one, run "
    "`git rebase -i HEAD~N`. In the editor, keep the first line as `pick` and change the "
    "others to `squash` (or `s`). Save and close; git then opens an editor for the combined "
    "commit message. If the commits were already pushed, update the remote with "
    "`git push --force-with-lease`, which refuses to overwrite work you have not seen. "
    "To abort a rebase in progress, run `git rebase --abort`."
)
SOURDOUGH_MANUAL = (
    "Skill manual: baking sourdough bread. Feed the starter 8 to 12 hours before mixing. Mix "
    "500 g flour with 350 g water and rest for an hour, then add 100 g active starter and 10 g "
    "salt. Fold the dough every 30 minutes for 2 hours, shape it, proof it overnight in the "
    "fridge and bake it in a covered pot at 250 C for 20 minutes, then 20 uncovered at 230 C."
)
QUESTION = "What is 17 * 23?"
METHOD = "print(17 * 23)"
QUERIES = (
    ("exact", "what is 17*23"),
    ("graft", "How can I squash my last three commits into one?"),
    ("abstain", "Who won the football world cup in 1998?"),
)

Log = Optional[Callable[[str], None]]


def run_demo(model: Optional[str] = None, log: Log = None, repeats: int = 5) -> dict:
    """Run the demo; return ``{"steps": [...], "ok": bool}``."""
    say = log or (lambda line: None)
    steps: list[dict] = []

    def step(name: str, ok: bool, summary: str, **data) -> None:
        steps.append({"name": name, "ok": bool(ok), "summary": summary, **data})
        say(f"[{'ok' if ok else 'FAILED'}] {name}: {summary}")

    with tempfile.TemporaryDirectory(prefix="skillgraft-demo-") as home:
        say(f"loading {model or default_model()} and the embedder ...")
        with SkillMemory(home, model=model) as memory:
            _deposit(memory, step)
            _route(memory, step)
            _answer(memory, step)
            _graft_exactness(memory, step)
            _cost(memory, step, repeats)
    return {"steps": steps, "ok": bool(steps) and all(s["ok"] for s in steps)}


def _deposit(memory: SkillMemory, step) -> None:
    for name, text, examples in (
        ("git-squash", GIT_MANUAL, ["how do I squash my last commits?", "combine several commits into one"]),
        ("sourdough", SOURDOUGH_MANUAL, ["how do I bake sourdough bread?", "my loaf came out dense"]),
    ):
        block = memory.add_manual(name, text, examples=examples)
        step(f"deposit manual {name}", True, f"block {block.id}: {block.n_tokens} tokens, {block.n_bytes:,} bytes")
    block = memory.add_solution(QUESTION, "391", method=METHOD, verifier="python")
    step("deposit verified solution", block.verifier == "python", f"block {block.id}: {QUESTION} = 391 (python verifier ran the method)")
    try:
        memory.add_solution("What is 17 * 24?", "400", method="print(17 * 24)", verifier="python")
        refused = False
    except VerificationError as exc:
        refused, reason = True, str(exc)
    step("refuse a wrong solution", refused, reason if refused else "a wrong answer was stored")


def _route(memory: SkillMemory, step) -> None:
    for expected, query in QUERIES:
        recall = memory.recall(query)
        target = f" -> {recall.block.name}" if recall.block else ""
        step(
            f"route: {expected}",
            recall.decision == expected,
            f"{query!r}: {recall.decision}{target} (score {recall.score:.2f}, threshold {recall.threshold:.2f})",
            decision=recall.decision,
        )


def _answer(memory: SkillMemory, step) -> None:
    exact = memory.generate("What is 17*23?")
    step("recurring question", exact.decision == "exact" and exact.text == "391",
         f"answered {exact.text!r} by lookup with {exact.decoded_tokens} decoded tokens")
    graft = memory.generate(QUERIES[1][1], max_tokens=48)
    block = memory.store.get("git-squash")
    kept = graft.gate is not None and not graft.gate.fell_back
    expected = ("graft", block.id, block.n_tokens) if kept else ("abstain", None, 0)
    outcome = "the gate kept the graft" if kept else f"the gate fell back ({graft.gate and graft.gate.reason})"
    step("answer with a grafted manual",
         graft.recall.block_id == block.id and (graft.decision, graft.block_id, graft.prefill_tokens_avoided) == expected
         and bool(graft.text),
         f"[{graft.decision}] {graft.text[:90]!r} ({graft.prefill_tokens_avoided} prefill tokens avoided; {outcome})")


def _graft_exactness(memory: SkillMemory, step) -> None:
    engine = memory.engine
    block = memory.store.get("git-squash")
    state = memory.store.load_state(block).state
    _, turn = engine.chat_split(block.source, QUERIES[1][1])
    query = engine.tokenize(turn, add_bos=False)
    engine.prefill(list(block.tokens))
    engine.append(query)
    fresh = engine.logits_bytes()
    grafted = engine.graft(state, query, block.id).astype("float32").tobytes()
    step("graft is byte-exact", fresh == grafted,
         f"grafted logits {'SHA-256-equal to' if fresh == grafted else 'DIFFER from'} a fresh prefill of the same tokens")


def _cost(memory: SkillMemory, step, repeats: int) -> None:
    engine = memory.engine
    block = memory.store.get("git-squash")
    state = memory.store.load_state(block).state
    prefill, restore = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        engine.prefill(list(block.tokens))
        prefill.append(time.perf_counter() - started)
        restore.append(engine.restore(state, block.id, verify_hash=False))
    prefill_s, restore_s = statistics.median(prefill), statistics.median(restore)
    step("prefill vs restore", restore_s < prefill_s,
         f"{block.n_tokens} tokens: prefill {prefill_s * 1000:.1f} ms, restore {restore_s * 1000:.2f} ms "
         f"({prefill_s / max(restore_s, 1e-9):.0f}x, median of {repeats})",
         prefill_s=prefill_s, restore_s=restore_s)
