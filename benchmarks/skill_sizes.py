"""What a collection of Agent Skills costs on disk as blocks, per model and KV cache type.

For each embedded model and cache type: the block bytes per token and header, measured from
three captures of different lengths (a block of N tokens is ``header + N x per_token`` bytes,
checked on the third); the collection's parts as the importer plans them with that model's own
tokenizer and window (no capture: planning needs only token counts); and their bytes. With
``--verify N``, the byte-exactness self-test (``skillgraft.verify.exactness.verify``, what
``skillgraft verify --kv-type KV`` runs) within each runtime. Then, from published shapes, the
bytes per token of 1-8B models (layers x KV heads x head dim x 2 for K and V x bytes per value) and what
the collection would cost at SmolLM2's token count.

    .venv/bin/python benchmarks/skill_sizes.py ROOT [--verify 20] [--out docs/data/skill_sizes.json]
"""

from __future__ import annotations

import argparse
import sys
import time

from reports import write_report

from skillgraft.config import EngineSettings, kv_type_settings
from skillgraft.core.chat_layout import block_tokens
from skillgraft.skills.folder import read_skill_folder
from skillgraft.skills.scan import scan_for_skills
from skillgraft.engine.llama import Engine
from skillgraft.memory.deposits import QUERY_ROOM_TOKENS
from skillgraft.skills.trigger_evals import EVAL_QUERIES, training_examples
from skillgraft.skills.plan import plan_parts

# (model, KV cache type); kv_type_settings turns flash attention on for q8_0, which llama.cpp
# needs to quantize the V cache
RUNTIMES = [("smollm2-135m", "f16"), ("smollm2-135m", "q8_0"), ("gemma3-270m", "f16"), ("gemma3-270m", "q8_0")]
VALUE_BYTES = {"f16": 2.0, "q8_0": 34 / 32, "f32": 4.0}  # q8_0: blocks of 32 values, 32 bytes + an f16 scale
# Published shapes (the models' config.json): layers, KV heads, head dimension.
PUBLISHED = {
    "Llama 3.2 1B": (16, 8, 64), "Qwen2.5 1.5B": (28, 2, 128), "Gemma 2 2B": (26, 4, 256),
    "Llama 3.2 3B": (28, 8, 128), "Phi-3 mini 3.8B": (32, 32, 96), "Qwen2.5 7B": (28, 4, 128),
    "Mistral 7B": (32, 8, 128), "Llama 3.1 8B": (32, 8, 128),
}
PROBE = "Fold the dough, rest it, shape it and bake it covered. "


def block_bytes(engine: Engine) -> dict:
    """Header and per-token bytes of this runtime's blocks, from captures of three lengths."""
    sizes = []
    for repeats in (4, 16, 40):
        state = engine.capture(PROBE * repeats)
        sizes.append((state.n_tokens, len(state.payload)))
    (n1, b1), (n2, b2), (n3, b3) = sizes
    per_token = (b2 - b1) // (n2 - n1)
    header = b1 - n1 * per_token
    return {"per_token": per_token, "header": header, "linear": header + n3 * per_token == b3,
            "kv_bytes_per_token": engine.kv_bytes_per_token, "probes": sizes}


def collection(engine: Engine, root: str) -> dict:
    """The collection's parts as the importer plans them for ``engine``'s window."""
    room = engine.n_ctx - QUERY_ROOM_TOKENS
    blocks = tokens = text_bytes = 0
    per_skill = {}
    for path in scan_for_skills([root]).folders:
        folder = read_skill_folder(path)
        examples = training_examples(folder.data.get(EVAL_QUERIES))
        parts = plan_parts(folder, lambda text: len(block_tokens(engine, text)) <= room, examples)
        counts = [len(block_tokens(engine, text)) for text in dict.fromkeys(p.text for p in parts)]
        per_skill[folder.name] = counts
        blocks += len(counts)
        tokens += sum(counts)
        text_bytes += sum(f.size for f in folder.files)
    return {"skills": len(per_skill), "blocks": blocks, "tokens": tokens, "file_bytes": text_bytes, "per_skill": per_skill}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root")
    parser.add_argument("--verify", type=int, default=0, metavar="N", help="samples of the exactness self-test per runtime")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    results = {"runtimes": [], "published": []}
    for model, kv in RUNTIMES:
        settings = EngineSettings(**kv_type_settings(kv))
        with Engine(model, settings) as engine:
            row = {"model": model, "type_k": kv, "type_v": kv, "flash_attn": settings.flash_attn, "n_ctx": engine.n_ctx,
                   "fingerprint": engine.fingerprint.id, **block_bytes(engine), "collection": collection(engine, args.root)}
            found = row["collection"]
            row["collection_bytes"] = found["blocks"] * row["header"] + found["tokens"] * row["per_token"]
            if args.verify:
                from skillgraft.verify.exactness import verify

                started = time.perf_counter()
                report = verify(model, args.verify, engine=engine)
                row["verify"] = {k: report.get(k) for k in ("samples", "sha_equal", "argmax_mismatch", "kl_median", "kl_p99")}
                row["verify"]["seconds"] = round(time.perf_counter() - started, 1)
        results["runtimes"].append(row)
    smollm2_tokens = results["runtimes"][0]["collection"]["tokens"]
    for name, (layers, heads, dim) in PUBLISHED.items():
        per = {kv: layers * heads * dim * 2 * VALUE_BYTES[kv] for kv in ("f16", "q8_0")}
        results["published"].append({"model": name, "layers": layers, "kv_heads": heads, "head_dim": dim,
                                     "bytes_per_token": per, "collection_bytes": {k: v * smollm2_tokens for k, v in per.items()}})
    return write_report(results, args.out)


if __name__ == "__main__":
    sys.exit(main())
