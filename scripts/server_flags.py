"""What llama-server's flags the gateway pins cost against its defaults: a long prompt's prefill
and continuations of 15, 85 and 300 tokens after it (each extending the one before), on four servers of one binary and model
(``--no-repack -fa off``, the gateway's; ``-fa on``; repacking on; the defaults), requests taken
in turn server by server (the order reversing each round), prompt cache on, one slot, the same
threads (``SKILLGRAFT_THREADS``) and context. Prints each server's median llama-server
``prompt_ms`` per shape and writes them as JSON:

    SKILLGRAFT_THREADS=2 python scripts/server_flags.py smollm2-135m qwen2.5-coder-0.5b --out docs/data/server_flags.json
"""
import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from skillgraft.bench.agent_texts import Texts
from skillgraft.bench.plain_server import PlainLlamaServer

FLAGS = {"gateway (no repack, fa off)": ["--no-repack", "-fa", "off"], "fa on": ["--no-repack", "-fa", "on"],
         "repack, fa off": ["-fa", "off"], "defaults": []}
TAILS = (15, 100, 400)  # each continuation extends the one before: 15, 85 and 300 tokens evaluated


def measure(model: str, rounds: int) -> dict:
    texts = Texts(False)
    manuals = list(texts.manuals.values())
    prompt, more = texts.agent + "\n\n" + manuals[0][0], manuals[1][0]
    with tempfile.TemporaryDirectory() as workdir:
        servers = {name: PlainLlamaServer(model, 1, Path(workdir), flags=extra) for name, extra in FLAGS.items()}
        try:
            some = next(iter(servers.values())).client
            extra_tokens = some.post("/tokenize", json={"content": more}).json()["tokens"]
            times: dict = {name: {} for name in servers}
            for round_ in range(rounds):
                for name in list(servers)[:: 1 if round_ % 2 == 0 else -1]:
                    client, base = servers[name].client, f"[{round_:02d}] " + prompt
                    shapes = [("prefill", base)] + [(f"tail {n}", None) for n in TAILS]
                    base_tokens = client.post("/tokenize", json={"content": base}).json()["tokens"]
                    for shape, text in shapes:
                        body = text if text is not None else [*base_tokens, *extra_tokens[:int(shape.split()[1])]]
                        reply = client.post("/completion", json={"prompt": body, "n_predict": 1, "cache_prompt": True}).json()
                        times[name].setdefault(shape, []).append((reply["timings"]["prompt_n"], reply["timings"]["prompt_ms"]))
                        time.sleep(0.1)  # the last server's threads stop spinning
        finally:
            for server in servers.values():
                server.stop()
    return {name: {shape: {"tokens": values[0][0], "prompt_ms": round(statistics.median(ms for _, ms in values[1:]), 1),
                           "min": round(min(ms for _, ms in values[1:]), 1), "max": round(max(ms for _, ms in values[1:]), 1)}
                   for shape, values in shapes_.items()} for name, shapes_ in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    parser.add_argument("--rounds", type=int, default=7, help="rounds, the first left out as a warm-up")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    report = {}
    for model in args.models:
        report[model] = measure(model, args.rounds)
        for name, shapes in report[model].items():
            print(f"{model:20} {name:28}", "  ".join(f"{shape} ({v['tokens']}) {v['prompt_ms']:7.1f}" for shape, v in shapes.items()))
    if args.out:
        args.out.write_text(json.dumps({"rounds": args.rounds, "models": report}, indent=1) + "\n")


if __name__ == "__main__":
    main()
