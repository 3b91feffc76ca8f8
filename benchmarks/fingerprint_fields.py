"""Which runtime settings change a captured payload or the logits after a graft.

For each embedded model and each setting, a ~700-token text is captured under the default
settings and under one changed setting; the report says whether the payload's SHA-256 and
the logits after grafting it and evaluating a query are byte-identical. Only settings that
change either belong in the runtime fingerprint (DESIGN §5).

    .venv/bin/python benchmarks/fingerprint_fields.py [--out docs/data/fingerprint_fields.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys

from skillgraft.config import engine_settings
from skillgraft.engine.llama import Engine
from skillgraft.errors import SkillgraftError

TEXT = "Skill manual: squashing commits with git. Run git rebase -i HEAD~N and mark the others as squash. " * 30
QUERY = " How do I squash my last three commits?"
VARIANTS = [
    ("n_threads", {"n_threads": 1}),
    ("n_ctx", {"n_ctx": 2048}),
    ("n_ctx", {"n_ctx": 8192}),
    ("n_batch", {"n_batch": 256, "n_ubatch": 256}),
    ("n_batch", {"n_batch": 64, "n_ubatch": 64}),
    ("n_ubatch", {"n_ubatch": 16}),
    ("n_batch alone", {"n_batch": 1024}),  # the micro-batch (n_ubatch) kept at 512
    ("n_batch alone", {"n_batch": 2048}),
    ("type_k/type_v", {"type_k": "f32", "type_v": "f32"}),
    ("flash_attn", {"flash_attn": True}),
]


def measure(model: str, overrides: dict) -> dict:
    with Engine(model, engine_settings(**overrides)) as engine:
        state = engine.capture(TEXT)
        logits = engine.graft(state, engine.tokenize(QUERY, add_bos=False))
        return {
            "payload_sha256": state.sha256,
            "bytes": state.n_bytes,
            "tokens": state.n_tokens,
            "logits_sha256": hashlib.sha256(logits.tobytes()).hexdigest(),
            "argmax": int(logits.argmax()),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/data/fingerprint_fields.json")
    parser.add_argument("--models", default="smollm2-135m,gemma3-270m")
    args = parser.parse_args()
    rows = []
    for model in args.models.split(","):
        base = measure(model, {"n_threads": 2})
        for field, overrides in VARIANTS:
            try:
                other = measure(model, {"n_threads": 2, **overrides})
            except SkillgraftError as exc:
                rows.append({"model": model, "field": field, "change": overrides, "error": str(exc)})
                continue
            rows.append({
                "model": model,
                "field": field,
                "change": overrides,
                "payload_equal": other["payload_sha256"] == base["payload_sha256"],
                "logits_equal": other["logits_sha256"] == base["logits_sha256"],
                "argmax_equal": other["argmax"] == base["argmax"],
                "bytes": [base["bytes"], other["bytes"]],
            })
            print(json.dumps(rows[-1]), file=sys.stderr)
    with open(args.out, "w") as handle:
        json.dump({"text_tokens": base["tokens"], "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main()
