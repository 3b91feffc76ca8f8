"""What a later agent request costs behind the gateway against the bare llama-server, without
the machine's drift: the systems of ``skillgraft bench agent`` (the gateway over its own
llama-server, and llama-server with its defaults and host prompt cache, the manual pasted),
the agent's later questions asked twice, the two taking turns request by request (the one
going first alternating). ``SKILLGRAFT_THREADS=2 python scripts/gateway_overhead.py`` prints
each system's median request [min-max] and the gateway's stages (median)."""
import statistics
import sys
import tempfile
from pathlib import Path

from skillgraft.bench.agent import AGENT_MANUAL, GatewaySystem, LlamaServerSystem, _user
from skillgraft.bench.agent_texts import Texts

MODEL = sys.argv[1] if len(sys.argv) > 1 else "smollm2-135m"
ROUNDS = 2

texts = Texts(False)
manuals = {AGENT_MANUAL: texts.manuals[AGENT_MANUAL]}
questions = texts.agent_questions
with tempfile.TemporaryDirectory() as home:
    ours = GatewaySystem(Path(home), MODEL, manuals, settle=texts.settle_threshold)
    theirs = LlamaServerSystem(MODEL, manuals)
    seconds = {ours.name: [], theirs.name: []}
    try:
        for system in (ours, theirs):
            system.ask(texts.agent, [_user(questions[0])], AGENT_MANUAL)
        for i, question in enumerate(questions[1:] * ROUNDS):
            for system in (ours, theirs) if i % 2 == 0 else (theirs, ours):
                seconds[system.name].append(system.ask(texts.agent, [_user(question)], AGENT_MANUAL)["seconds"])
        stages = ours.stages()[1:]
    finally:
        ours.stop()
        theirs.stop()
for name, values in seconds.items():
    print(f"{name:14} request {statistics.median(values) * 1000:6.1f} ms "
          f"[{min(values) * 1000:.1f}-{max(values) * 1000:.1f}]")
for key in sorted(set().union(*stages)):
    values = [stage[key] for stage in stages if isinstance(stage.get(key), (int, float))]
    if values:
        print(f"  gateway stage {key:24} {statistics.median(values) * 1000:6.1f} ms")
