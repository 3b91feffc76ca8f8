"""What a later agent request costs around its evaluation: :class:`SkillMemory` in this process
against llama-cpp-python's ``Llama``, on the prompts of ``skillgraft bench agent --in-process``
(the systems interleaved request by request, so the cores' drift falls on both alike; each
system's evaluation timed inside it). ``SKILLGRAFT_THREADS=2 python scripts/in_process_overhead.py``
prints, per system, the median request, evaluation and the rest (routing, template, tokenizer,
sampler, the ledger row)."""
import statistics
import sys
import tempfile
import time
from pathlib import Path

import skillgraft.engine.llama as engine_module
from skillgraft.bench.agent import AGENT_MANUAL, _user
from skillgraft.bench.agent_local import LlamaSystem, MemorySystem
from skillgraft.bench.agent_texts import Texts

MODEL = sys.argv[1] if len(sys.argv) > 1 else "smollm2-135m"
ROUNDS = 10
spent = [0.0]


def timed(call):
    def run(*args, **kwargs):
        started = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - started
    return run


texts = Texts(False)
manual = texts.manuals[AGENT_MANUAL]
questions = texts.agent_questions
engine_module.Engine._decode = timed(engine_module.Engine._decode)
with tempfile.TemporaryDirectory() as home:
    ours = MemorySystem(Path(home) / "store", MODEL, manual, settle=texts.settle_threshold)
    theirs = LlamaSystem(MODEL, manual[0])
    theirs.llama.eval = timed(theirs.llama.eval)
    results = {ours.name: [], theirs.name: []}
    try:
        for system in (ours, theirs):
            system.ask(texts.agent, [_user(questions[0])], False)
        for i, question in enumerate((questions[1:] * ROUNDS)[:ROUNDS]):
            for system in (ours, theirs) if i % 2 == 0 else (theirs, ours):
                spent[0] = 0.0
                seconds = system.ask(texts.agent, [_user(question)], False)["seconds"]
                results[system.name].append((seconds, spent[0]))
    finally:
        ours.close()
        theirs.close()
for name, rows in results.items():
    print(f"{name:18} request {statistics.median(s for s, _ in rows) * 1000:6.1f} ms  "
          f"evaluation {statistics.median(e for _, e in rows) * 1000:6.1f} ms  "
          f"around it {statistics.median(s - e for s, e in rows) * 1000:5.1f} ms")
