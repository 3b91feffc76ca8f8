"""Only what changes a payload's bytes or the logits belongs in the fingerprint.

The thread count and the context window were recorded once; these tests show they change
neither, on both models, so a store captured with 2 threads serves with 1, and one captured
under a 4,096-token window serves under the model's own. benchmarks/fingerprint_fields.py measures
every other field (docs/limits.md has the table).
"""

from __future__ import annotations

import pytest

from skillgraft.config import engine_settings
from skillgraft.engine.llama import Engine

pytestmark = pytest.mark.model

TEXT = "Skill manual: squashing commits with git. Run git rebase -i HEAD~N and mark the others as squash. " * 12


@pytest.mark.parametrize("model", ["smollm2-135m", "gemma3-270m"])
def test_thread_count_leaves_payload_and_logits_identical(model):
    results = []
    for threads in (1, 2):
        with Engine(model, engine_settings(n_threads=threads)) as engine:
            state = engine.capture(TEXT)
            logits = engine.graft(state, engine.tokenize(" How do I squash?", add_bos=False))
            results.append((state.sha256, state.fingerprint.id, logits.tobytes()))
    (sha1, fp1, logits1), (sha2, fp2, logits2) = results
    assert sha1 == sha2, "the payload depends on the thread count"
    assert logits1 == logits2, "the logits depend on the thread count"
    assert fp1 == fp2, "the thread count is still in the fingerprint"


@pytest.mark.parametrize("model", ["smollm2-135m", "gemma3-270m"])
def test_the_context_window_leaves_payload_and_logits_identical(model):
    """A block of ~750 tokens, then a query, under windows of 1,024 (the block near its end),
    4,096 and the model's own (8,192 and 32,768): llama.cpp attends over the cells in use."""
    results = []
    for n_ctx in (1024, 4096, None):
        with Engine(model, engine_settings(n_ctx=n_ctx)) as engine:
            state = engine.capture(TEXT * 2)
            logits = engine.graft(state, engine.tokenize(" How do I squash?", add_bos=False))
            results.append((engine.n_ctx, state.sha256, state.fingerprint.id, logits.tobytes()))
    windows = [r[0] for r in results]
    assert windows[:2] == [1024, 4096] and windows[2] == {"smollm2-135m": 8192, "gemma3-270m": 32768}[model]
    assert len({r[1] for r in results}) == 1, "the payload depends on the window"
    assert len({r[3] for r in results}) == 1, "the logits depend on the window"
    assert len({r[2] for r in results}) == 1, "the window is still in the fingerprint"


@pytest.mark.parametrize("field, value, migration, settings", [
    ("n_threads", 2, "m007_retire_thread_count", {"n_threads": 1}),
    ("n_ctx", 4096, "m024_retire_context_window", {}),  # the old default window; the model's own now
], ids=["captured with two threads, served with one", "captured under 4096 tokens, served under the model's window"])
def test_a_store_that_recorded_a_retired_field_is_rekeyed_and_serves(stocked, embedder, field, value, migration, settings):
    """An older store recorded the field; opening it re-keys its fingerprints."""
    import hashlib
    import json

    from skillgraft.memory import SkillMemory

    store = stocked.store
    current = stocked.engine.fingerprint
    old_json = json.dumps({**json.loads(current.canonical_json()), field: value}, sort_keys=True, separators=(",", ":"))
    old_id = hashlib.sha256(old_json.encode()).hexdigest()[:16]
    with store.db.conn:
        store.db.execute("INSERT INTO fingerprints (id, data, created_at) VALUES (?, ?, '')", [old_id, old_json])
        store.db.execute("UPDATE blocks SET fingerprint_id = ?", [old_id])
        store.db.execute("DELETE FROM fingerprints WHERE id = ?", [current.id])
        store.db.execute("DELETE FROM _migrations WHERE name = ?", [migration])
    with Engine("smollm2-135m", engine_settings(**settings)) as engine:
        with SkillMemory(store.home, engine=engine, embedder=embedder) as reopened:
            assert reopened.store.fingerprint_ids() == {engine.fingerprint.id}
            result = reopened.generate("how do I squash my last commits?", max_tokens=4, gate=False)
            assert result.decision == "graft" and result.prefill_tokens_avoided > 0
