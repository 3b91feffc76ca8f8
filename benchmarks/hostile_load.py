"""The gateway under a mixed hostile load: how fast it answers ordinary requests meanwhile.

Starts ``skillgraft serve`` (SmolLM2, one llama-server of two slots) on a fresh store and, for
``--seconds``, keeps these going at once: the schemas that used to cost memory or CPU
(``^[a]{3000000}$``, a nested ambiguous pattern, 950 optional properties), clients that ask for
``n=8`` long answers and disconnect after half a second (streamed and not), and one ordinary
client asking ``GET /v1/models`` and an 8-token chat in turn. Prints one JSON object: the
ordinary latencies (median and worst), the hostile requests' statuses, the gateway's peak
memory, and whether every slot was free once the load stopped.

    .venv/bin/python benchmarks/hostile_load.py --seconds 30
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

from skillgraft.bench.serve import GatewayProcess

MODEL = "smollm2-135m"
SCHEMAS = {
    "quantifier": {"type": "string", "pattern": "^[a]{3000000}$"},
    "nested": {"type": "string", "pattern": "^((a{0,12}){0,12}){0,12}$"},
    "optional": {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(950)}},
}


def _chat(**extra) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": "Write a long story about a dragon."}], **extra}


def _vm(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) // 1024
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--workers", type=int, default=4, help="threads per hostile kind")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        gateway = GatewayProcess(Path(folder) / "store", servers=1, model=MODEL, log_path=Path(folder) / "log",
                                 extra_args=["--create", "--slots", "2"])
        url, stop = gateway.url, threading.Event()
        statuses: Counter = Counter()
        lock = threading.Lock()
        rss_before = _vm(gateway.process.pid, "VmRSS")

        def count(kind: str, status) -> None:
            with lock:
                statuses[f"{kind} {status}"] += 1

        def schemas(kind: str) -> None:
            form = {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMAS[kind]}}
            with httpx.Client(trust_env=False, timeout=60) as client:
                while not stop.is_set():
                    count(kind, client.post(url + "/v1/chat/completions", json=_chat(response_format=form)).status_code)

        def leaver(stream: bool) -> None:
            kind = "n=8 streamed, left" if stream else "n=8, left"
            while not stop.is_set():
                try:
                    with httpx.Client(trust_env=False, timeout=0.5) as client:
                        client.post(url + "/v1/chat/completions", json=_chat(n=8, max_tokens=200, stream=stream))
                    count(kind, "answered")
                except httpx.TimeoutException:
                    count(kind, "left")

        threads = [threading.Thread(target=schemas, args=(kind,)) for kind in SCHEMAS for _ in range(args.workers)]
        threads += [threading.Thread(target=leaver, args=(stream,)) for stream in (False, True) for _ in range(2)]
        for thread in threads:
            thread.start()
        models, chats = [], []
        with httpx.Client(trust_env=False, timeout=120) as client:
            deadline = time.monotonic() + args.seconds
            while time.monotonic() < deadline:
                started = time.perf_counter()
                assert client.get(url + "/v1/models").status_code == 200
                models.append(time.perf_counter() - started)
                started = time.perf_counter()
                answer = client.post(url + "/v1/chat/completions", json=_chat(max_tokens=8))
                chats.append((time.perf_counter() - started, answer.status_code))
            stop.set()
            for thread in threads:
                thread.join()
            time.sleep(1.0)
            health = client.get(url + "/healthz").json()
        peak = _vm(gateway.process.pid, "VmHWM")
        gateway.stop()
    seconds = [s for s, status in chats if status == 200]
    print(json.dumps({
        "seconds": args.seconds,
        "models_ms": {"median": round(statistics.median(models) * 1000, 1), "max": round(max(models) * 1000, 1),
                      "n": len(models)},
        "chat_s": {"median": round(statistics.median(seconds), 2) if seconds else None,
                   "max": round(max(seconds), 2) if seconds else None, "n": len(chats),
                   "statuses": dict(Counter(status for _, status in chats))},
        "hostile": dict(sorted(statuses.items())),
        "gateway_rss_mib": {"before": rss_before, "peak": peak},
        "slots_leased_after": health.get("slots_leased"),
    }, indent=2))


if __name__ == "__main__":
    main()
