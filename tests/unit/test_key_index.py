"""The key index: one row per block (its centroid) and the keys searched alone; a query then meets
only the candidates' own keys, and the ranking is the one a comparison with every block gives."""

from __future__ import annotations

import numpy as np

from skillgraft.bench.route_catalog import write_skill_folders
from skillgraft.routing.key_index import KeyIndex
from skillgraft.routing.lexical import LexicalIndex
from skillgraft.routing.ranking import LEXICAL_WEIGHT, lexical_documents


def _unit(rows: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(rows / np.linalg.norm(rows, axis=1, keepdims=True), dtype=np.float32)


def _keys(blocks: int, per_block: int, seed: int = 0) -> tuple[np.ndarray, list[str]]:
    rng = np.random.default_rng(seed)
    return _unit(rng.standard_normal((blocks * per_block, 32))), [f"b{i // per_block:04d}" for i in range(blocks * per_block)]


def test_the_index_holds_a_row_per_block_and_the_keys_searched_alone():
    vectors, block_ids = _keys(50, 3)
    alone = [i == 7 for i in range(len(block_ids))]
    index = KeyIndex(vectors, block_ids, alone=alone)
    assert index.rows == 50 + 1 and index.size == 150
    sims, found = index.search(vectors[7:8], k=1)  # a key searched alone is found by itself
    assert index.blocks[found[0][0]] == block_ids[7] and abs(sims[0][0] - 1.0) < 1e-5
    query = vectors[40]
    positions = [3, 13, 0]
    expected = [max(float(vectors[i] @ query) for i, b in enumerate(block_ids) if b == index.blocks[p]) for p in positions]
    assert np.allclose(index.nearest_keys(query, positions), expected, atol=1e-6)


def test_one_skills_many_blocks_cannot_crowd_the_others_out():
    vectors, block_ids = _keys(60, 2)
    query = vectors[0]
    near = _unit(query + 0.05 * np.random.default_rng(1).standard_normal((80, 32)))  # 40 blocks of one skill, all near
    vectors = np.concatenate([near, vectors])
    block_ids = [f"a{i // 2:03d}" for i in range(80)] + block_ids
    index = KeyIndex(_unit(vectors), block_ids)
    owner = lambda block_id: "skill-a" if block_id.startswith("a") else block_id  # noqa: E731
    (found,) = index.nearest_blocks(query[None, :], owner, 4)
    assert len({owner(index.blocks[p]) for p in found if p >= 0}) >= 4


def test_the_cache_keeps_the_keys_and_refuses_a_changed_file(tmp_path):
    vectors, block_ids = _keys(20, 2)
    index = KeyIndex(vectors, block_ids, alone=[i % 5 == 0 for i in range(40)])
    index.save(tmp_path, "v1", "enc")
    loaded = KeyIndex.load(tmp_path, "v1", "enc", set(block_ids))
    assert loaded is not None and loaded.rows == index.rows
    assert np.array_equal(loaded.keys, index.keys) and np.array_equal(loaded.alone, index.alone)
    assert np.array_equal(loaded.search(vectors[:3])[1], index.search(vectors[:3])[1])
    with np.load(tmp_path / "keys.npz") as arrays:
        saved = dict(arrays)
    saved["alone"] = ~saved["alone"]
    with open(tmp_path / "keys.npz", "wb") as handle:
        np.savez(handle, **saved)
    assert KeyIndex.load(tmp_path, "v1", "enc", set(block_ids)) is None


def test_a_lead_key_is_a_third_of_its_blocks_dense_score_and_kept_in_the_cache(tmp_path):
    vectors, block_ids = _keys(10, 2)
    lead = _unit(np.random.default_rng(3).standard_normal((1, 32)))
    index = KeyIndex(vectors, block_ids, lead_vectors=lead, lead_block_ids=["b0004"])
    assert index.rows == 10  # a lead key is never searched
    query = vectors[1]
    positions = [index.blocks.index("b0004"), index.blocks.index("b0000")]
    nearest, dense = index.dense_scores(query, positions, 0.5)
    mixed = 0.5 * nearest + 0.5 * (index.centroids[positions] @ query)
    assert np.allclose(dense, [(2 * mixed[0] + float(lead[0] @ query)) / 3, mixed[1]], atol=1e-6)
    index.save(tmp_path, "v1", "enc")
    loaded = KeyIndex.load(tmp_path, "v1", "enc", set(block_ids))
    assert np.allclose(loaded.dense_scores(query, positions, 0.5)[1], dense, atol=1e-6)


def test_the_route_ranks_as_a_comparison_with_every_skill_would(fake_memory, tmp_path):
    words = ["invoice", "sprint", "garden", "kernel", "poster", "ledger", "vaccine", "tunnel", "harbor", "violin",
             "glacier", "pepper", "satellite", "cushion", "lantern", "orchid", "compiler", "saddle", "quartz", "falcon"]
    rows = [{"name": f"{a}-{b}-tool", "description": f"Works with {a} and {b} records for the {a} team.",
             "headings": [f"# {b.title()} steps"], "first_lines": [f"Open the {a} {b} file."]}
            for i, a in enumerate(words) for b in words[i + 1:i + 5]]
    write_skill_folders(rows, tmp_path / "skills")
    fake_memory.skills.import_folders(tmp_path / "skills")
    router = fake_memory.router
    index = router.index()
    assert index.rows < index.size  # the skills' name and description keys are one row each
    groups, _ = fake_memory.store.skill_routing()
    lexical = LexicalIndex.build(lexical_documents(fake_memory.store.key_texts(), groups))
    queries = ["sort the garden ledger records", "tune the violin for the harbor concert", "falcon quartz team",
               "compiler kernel tunnel", "bake a cake"]
    for query, ranking in zip(queries, router.rankings(queries)):
        vector = router.embedder.encode([query])[0]
        coverage = dict(zip(lexical.owners, lexical.coverage(query)))
        scores = {}
        for position, block_id in enumerate(index.blocks):
            owner = groups.get(block_id, block_id)
            dense = float(index.dense_scores(vector, [position], 0.5)[1][0])  # every skill's, one at a time
            score = dense + LEXICAL_WEIGHT * coverage.get(owner, 0.0)
            scores[owner] = max(scores.get(owner, -9.0), score)
        block_id, score = ranking.scored[0]
        assert abs(score - max(scores.values())) < 1e-5 and abs(scores[groups[block_id]] - score) < 1e-5
