"""First access of one block from a bucket vs the local folder vs re-prefilling it, side by side.

Starts a real S3-API server (moto) and PostgreSQL on loopback, deposits one captured block of
``--tokens`` tokens into a store with the home's blocks folder and into a shared one (catalog in
PostgreSQL, blocks in the bucket), then times, interleaved in each repetition:

- ``prefill``: re-prefilling the block's tokens (what no memory costs);
- ``local``: first access from the folder (read, size and SHA-256 check, restore);
- ``bucket``: first access from the bucket on a host that never saw it (download, check,
  write the host's cache, restore);
- ``bucket_cached``: the same host again after its in-process LRU is dropped (read from its
  disk cache, check, restore).

Prints one JSON object: medians with their min-max spread. Run from the repository root::

    .venv/bin/python benchmarks/shared_first_access.py --tokens 4096 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.shared_servers import PostgresServer, S3Server  # noqa: E402

from skillgraft.bench.runs import corpus_tokens, machine  # noqa: E402
from skillgraft.config import engine_settings  # noqa: E402
from skillgraft.engine.llama import Engine  # noqa: E402
from skillgraft.store.block_store import BlockStore  # noqa: E402


def timed(action) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def run(model: str, n_tokens: int, repeats: int) -> dict:
    import os

    server, postgres = S3Server(), PostgresServer()
    os.environ.update(server.env())
    catalog = postgres.database()
    folder = Path(tempfile.mkdtemp(prefix="skillgraft-bench-shared-"))
    try:
        with Engine(model, engine_settings(n_ctx=((n_tokens + 64) // 256 + 1) * 256)) as engine:
            tokens = corpus_tokens(engine, n_tokens)
            state = engine.capture(tokens)
            local = BlockStore(folder / "local")
            block, _ = local.put(state, name="bench", kind="manual", source="bench")
            url = server.prefix_url()
            BlockStore(folder / "writer", catalog=catalog, blocks=url).put(state, name="bench", kind="manual", source="bench")
            times: dict[str, list[float]] = {"prefill": [], "local": [], "bucket": [], "bucket_cached": []}
            engine.prefill(tokens[:32])  # warm-up
            for repeat in range(repeats + 1):
                reader = BlockStore(folder / f"reader{repeat}", catalog=catalog, blocks=url)  # a host that never saw it
                reader_block = reader.get("bench")

                def first(store, blk):
                    store.evict(blk.sha256)
                    engine.restore(store.load_state(blk).state, verify_hash=False)

                row = {
                    "prefill": timed(lambda: engine.prefill(tokens)),
                    "local": timed(lambda: first(local, block)),
                    "bucket": timed(lambda: first(reader, reader_block)),
                    "bucket_cached": timed(lambda: first(reader, reader_block)),
                }
                reader.close()
                if repeat:  # the first round is the warm-up
                    for key, value in row.items():
                        times[key].append(value)
        summary = {key: {"median_s": statistics.median(v), "min_s": min(v), "max_s": max(v)} for key, v in times.items()}
        prefill = times["prefill"]
        for key in ("local", "bucket", "bucket_cached"):
            summary[key]["prefill_over_this"] = statistics.median(prefill) / summary[key]["median_s"]
            summary[key]["prefill_over_this_range"] = [min(prefill) / max(times[key]), max(prefill) / min(times[key])]
        summary["bucket"]["over_local_range"] = [min(times["bucket"]) / max(times["local"]),
                                                 max(times["bucket"]) / min(times["local"])]
        summary["bucket"]["over_local"] = summary["bucket"]["median_s"] / summary["local"]["median_s"]
        return {"kind": "shared_first_access", "model": model, "tokens": n_tokens, "bytes": state.n_bytes,
                "repeats": repeats, "machine": machine(), "results": summary}
    finally:
        server.close()
        postgres.close()
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=5)
    options = parser.parse_args()
    print(json.dumps(run(options.model, options.tokens, options.repeats), indent=2))


if __name__ == "__main__":
    main()
