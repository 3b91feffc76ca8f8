"""An agent over a small library of skill manuals.

Three manuals are deposited once (each prefilled a single time, its KV state stored as a
block). The agent then answers questions with memory.generate(): the memory grafts the one
relevant manual at its own position, or abstains on a question that no manual covers, and the
confidence gate checks every grafted answer.

Run: .venv/bin/python examples/skill_manual_agent.py   (embedded SmolLM2-135M, temporary store)
"""

from __future__ import annotations

import tempfile
import textwrap

from skillgraft import SkillMemory

MANUALS = {
    "git-squash": (
        "Skill manual: squashing commits with git. To squash the last N commits into one, run "
        "`git rebase -i HEAD~N`. In the editor, keep the first line as `pick` and change the others "
        "to `squash` (or `s`). Save and close; git then opens an editor for the combined commit "
        "message. If the commits were already pushed, update the remote with "
        "`git push --force-with-lease`. To abort a rebase in progress, run `git rebase --abort`.",
        ["how do I squash my last commits?", "combine several commits into one", "undo a rebase that went wrong"],
    ),
    "sourdough": (
        "Skill manual: baking sourdough bread. Feed the starter 8 to 12 hours before mixing. Mix "
        "500 g flour with 350 g water and rest for an hour, then add 100 g active starter and 10 g "
        "salt. Fold the dough every 30 minutes for 2 hours, shape it, proof it overnight in the "
        "fridge and bake it in a covered pot at 250 C for 20 minutes, then 20 uncovered at 230 C.",
        ["how do I bake sourdough bread?", "my loaf came out dense", "how much salt goes into bread dough?"],
    ),
    "bike-chain": (
        "Skill manual: replacing a bicycle chain. Shift to the smallest cog and the small chainring. "
        "Open the quick link with quick-link pliers, or push a pin out with a chain tool. Count the "
        "links of the old chain and shorten the new one to the same length. Thread it through the "
        "derailleurs, join it with a new quick link and pedal backwards to check it runs smoothly. "
        "Replace the chain when a chain checker shows 0.5 percent stretch.",
        ["how do I replace my bike chain?", "my bicycle chain is worn out", "how long should a new chain be?"],
    ),
}

QUESTIONS = [
    "How can I squash my last three commits into one?",
    "At what temperature should I bake sourdough in the covered pot?",
    "How do I know when my bicycle chain needs replacing?",
    "How do I cancel a git rebase that is in progress?",
    "Who won the football world cup in 1998?",  # out of domain: no manual covers it
]


def gate_verdict(gate) -> str:
    if gate is None:
        return "-"
    if gate.fell_back:
        return f"not confident ({gate.mean_logprob}), fell back to plain generation"
    return f"confident ({gate.mean_logprob} >= {gate.threshold})"


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="skillgraft-manuals-") as home:
        print("loading the embedded model and the embedder ...", flush=True)
        with SkillMemory(home) as memory:
            print("\n== deposit ==")
            for name, (text, examples) in MANUALS.items():
                block = memory.add_manual(name, text, examples=examples)
                print(f"  {name:11} block {block.id}: {block.n_tokens} tokens, {block.n_bytes:,} bytes")

            print("\n== answer ==")
            decisions = []
            for question in QUESTIONS:
                out = memory.generate(question, max_tokens=64)
                recall = out.recall
                block = recall.block.name if recall.block else f"none (closest: {recall.runner_up})"
                decisions.append(out.decision)
                print(f"\nQ: {question}")
                print(f"  decision  {out.decision}  (routed: {recall.decision})")
                print(f"  block     {block}")
                print(f"  score     {recall.score:.3f} vs threshold {recall.threshold:.3f}")
                print(f"  gate      {gate_verdict(out.gate)}")
                print(f"  tokens    {out.decoded_tokens} decoded, {out.prefill_tokens_avoided} prefill tokens avoided")
                lines = textwrap.wrap(out.text, 92) or [""]
                print("  A: " + "\n     ".join(lines))

            print(f"\ndecisions: {', '.join(decisions)}")
            print(f"abstained on the out-of-domain question: {decisions[-1] == 'abstain'}")


if __name__ == "__main__":
    main()
