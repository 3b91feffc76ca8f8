"""The known upstream llama.cpp slot bugs, each reproduced on the pinned llama-server (SmolLM2).

Each test sets up the conditions of one llama.cpp issue with the raw slot API and
``/completion`` (as :mod:`skillgraft.server.slot_states` and
:mod:`skillgraft.server.completions` call them), asserts what the pinned build does, and then
what skillgraft relies on. docs/limits.md (Known llama.cpp slot bugs) says the same in words.

One server for the module; a test that restarts it (a fresh process, a failed restore) does so
through the engine, which keeps its flags. The #28276 test starts a second server of its own: the
bug needs ``--cache-ram``, which skillgraft's servers never turn on.
"""

from __future__ import annotations

import struct

import pytest

from skillgraft.core.sampling import SamplingOptions
from skillgraft.errors import DamagedCellsError, ServerError, SlotReuseError
from skillgraft.server.slot_files import slot_file_from_block
from skillgraft.server.slot_states import SLOT_FILE_SUFFIX

from tests.required import require_llama_server

pytestmark = pytest.mark.server

PREFIX = "A git rebase rewrites a branch so that its commits sit on top of another base. " * 3
QUERY = " Question: what does it rewrite?"
PLAIN = "The capital of France is Paris. The capital of Italy is"
UNRELATED = "Bananas are yellow fruits that grow in warm places and are rich in potassium. " * 2
GREEDY = SamplingOptions(8)


@pytest.fixture(scope="module")
def server():
    from skillgraft.server.engine import LlamaServerEngine

    require_llama_server()
    engine = LlamaServerEngine("smollm2-135m")
    try:
        yield engine
    finally:
        engine.close()


@pytest.fixture(scope="module")
def block(server):
    return server.capture(PREFIX)


@pytest.fixture(scope="module")
def query(server):
    return server.tokenize(QUERY, add_bos=False)


def cold(server, tokens):
    """A fresh prefill of ``tokens`` in slot 0: the reference every answer is compared with."""
    server.erase_slot(0)
    fresh = server.complete(tokens, GREEDY, slot=0, n_probs=3, cache_prompt=False)
    assert fresh.cache_n == 0 and fresh.prompt_n == len(tokens)
    return fresh


def raw_restore(server, name: str, slot: int = 0) -> dict:
    """``POST /slots/{slot}?action=restore`` of a file in the slot folder, no check of skillgraft's
    in front (what the engine tracks of the slot is forgotten: the server decides what it holds)."""
    server.forget_held(slot)
    return server._request("POST", f"/slots/{slot}", params={"action": "restore"}, json={"filename": name})


def written_slot_file(server, state) -> str:
    """The name of ``state``'s slot file in the server's folder, written as the engine writes it."""
    with server.slot_files.lock:
        return server.slot_files.write(state)[0]


def nan_keys_then_bad_values(state) -> bytes:
    """``state``'s slot file with every key row set to NaN bits and layer 0's values claiming
    another type: llama.cpp writes all the keys into the cells, then refuses the values, as in
    llama.cpp #27052/#27068's damaged snapshot. Offsets follow ``llama_kv_cache::state_write``
    (one stream, one sequence a cell, V transposed as with flash attention off)."""
    data = bytearray(slot_file_from_block(state.tokens, state.payload))
    at = 12 + 4 * state.n_tokens  # header and token list
    n_stream, cells = struct.unpack_from("<II", data, at)
    assert (n_stream, cells) == (1, state.n_tokens)
    at += 8 + 12 * cells  # each cell: position, one sequence id count, the sequence id
    v_trans, n_layer = struct.unpack_from("<II", data, at)
    assert v_trans == 1 and n_layer == 30
    at += 8
    for _ in range(n_layer):
        key_type, row_bytes = struct.unpack_from("<iQ", data, at)
        assert key_type == 1  # f16
        at += 12
        data[at:at + cells * row_bytes] = b"\xff" * (cells * row_bytes)  # f16 NaN
        at += cells * row_bytes
    assert struct.unpack_from("<i", data, at)[0] == 1  # layer 0's values: f16 ...
    struct.pack_into("<i", data, at, 0)  # ... now said to be f32
    return bytes(data)


# -- llama.cpp #26676: a restore reports success, the next request re-processes the whole prompt --


def test_26676_a_restored_slot_is_reused_after_a_request_that_shared_only_a_preamble(server, block, query):
    """#26676 (open upstream; seen on a hybrid multimodal model and a dense Qwen): ``n_restored``
    is the whole state, yet the next request with the same prefix gets ``cache_n`` 0 or only the
    preamble an earlier request shared. On the pinned build with SmolLM2 the restored cells are
    reused: ``cache_n`` is the block's N and the answer equals a fresh prefill's.

    Covered by skillgraft's check either way: every completion after a restore must report
    ``cache_n == N`` and ``prompt_n == q`` (:func:`skillgraft.server.records.check_reuse`, on a
    streamed answer's first chunk), else :class:`SlotReuseError` (see the next test)."""
    prompt = [*block.tokens, *query]
    reference = cold(server, prompt)
    preamble = [*block.tokens[:4], *server.tokenize(" something else entirely, nothing like a rebase", add_bos=False)]
    assert server.complete(preamble, GREEDY, slot=0).cache_n == 4  # the slot now holds it: 4 tokens like the block's
    body = raw_restore(server, written_slot_file(server, block))
    assert body["n_restored"] == block.n_tokens
    after = server.complete(prompt, GREEDY, slot=0, n_probs=3)
    assert (after.cache_n, after.prompt_n) == (block.n_tokens, len(query))  # not 4 (the preamble), not 0
    assert after.steps == reference.steps


def test_26676_a_restore_into_a_fresh_process_is_reused(server, block, query):
    """#26676's other case: a restore into a process that has answered nothing yet. Reused on the
    pinned build: ``cache_n`` is N."""
    reference = cold(server, [*block.tokens, *query])
    restarts = server.restarts
    server.restart()  # the same flags, a new process: no request has run in it
    assert server.restarts == restarts + 1
    assert raw_restore(server, written_slot_file(server, block))["n_restored"] == block.n_tokens
    after = server.complete([*block.tokens, *query], GREEDY, slot=0, n_probs=3)
    assert (after.cache_n, after.prompt_n) == (block.n_tokens, len(query))
    assert after.steps == reference.steps


def test_26676_a_restore_that_is_not_reused_is_refused_before_any_token(server, block, query, monkeypatch):
    """Were the pinned build to have #26676, the slot path would see it: the restore reports all
    N tokens (here it really restores them, then the slot is emptied behind its back, which is
    what the issue's server holds after a restore) and the answer's first chunk shows ``cache_n``
    0, so :class:`SlotReuseError` is raised before a token reaches the caller: never an answer
    counted as reuse. The gateway answers such a request once more, restoring again
    (:meth:`skillgraft.gateway.service.Gateway.stream`); a build where every restore is a no-op
    would fail that one too (503), never answer wrongly."""
    real_restore = server.restore

    def restore_then_lose_it(state, block_id="", *, slot=0, verify_hash=True):
        restored = real_restore(state, block_id, slot=slot, verify_hash=verify_hash)
        assert restored.n_restored == state.n_tokens
        server._request("POST", f"/slots/{slot}", params={"action": "erase"})
        return restored

    monkeypatch.setattr(server, "restore", restore_then_lose_it)
    with server.answer_slot() as slot:
        slot.restore(block, "b1", keep=block.n_tokens)
        slot.prefill(query)
        steps = slot.generate(GREEDY)
        with pytest.raises(SlotReuseError, match=f"cache_n 0 \\(expected {block.n_tokens} restored cells\\)"):
            next(steps)
    monkeypatch.undo()
    with server.answer_slot() as slot:  # the same answer, restored for real, reuses the block
        slot.restore(block, "b1", keep=block.n_tokens)
        slot.prefill(query)
        assert [step.token for step in slot.generate(SamplingOptions(2))]
        assert (slot.reused_cells, slot.reused_from) == (block.n_tokens, "block")


# -- llama.cpp #28276: a restored slot stops the lookup of a longer state in --cache-ram --------


def test_28276_a_restored_slot_hides_a_longer_state_in_the_host_prompt_cache(server, block, query):
    """#28276 (open upstream) is present in the pinned build: after a restore, the slot holds a
    complete prefix of the next prompt (``f_keep`` 1), so ``get_available_slot`` never asks the
    host prompt cache (``--cache-ram``) for the longer state it holds; the request reuses only
    the N restored cells. The control shows the cache does hold it: without the restore the same
    request reuses every cell of the longer prompt.

    What skillgraft relies on holds: its servers run with ``--cache-ram 0`` (the engine's default,
    and the gateway's), and on a server with the cache on, the slot path still reuses exactly the
    restored block, checked by ``cache_n == N``, and answers as a fresh prefill does. The bug
    costs only the longer reuse. (A build that fixes it would load the longer state and report
    more than N cells: skillgraft's check would call that a :class:`SlotReuseError`, so graft
    servers keep ``--cache-ram 0``.)"""
    from skillgraft.server.engine import LlamaServerEngine

    longer = [*block.tokens, *query]
    then = [*longer, *server.tokenize(" And what about merges?", add_bos=False)]
    unrelated = server.tokenize(UNRELATED)
    reference = cold(server, then)  # the module's server: the same build and flags, no prompt cache
    with LlamaServerEngine("smollm2-135m", prompt_cache_mib=64) as cached:
        argv = cached.server.argv
        assert argv[argv.index("--cache-ram") + 1] == "64"
        cached.complete(longer, SamplingOptions(1), slot=0)  # the slot holds the longer prompt ...
        assert cached.complete(unrelated, SamplingOptions(1), slot=0).cache_n == 0  # ... saved to the cache as it goes
        control = cached.complete(then, GREEDY, slot=0, n_probs=3)
        assert control.cache_n == len(longer)  # found in the host cache
        assert control.steps == reference.steps
        cached.complete(unrelated, SamplingOptions(1), slot=0)  # away again (the longer state back in the cache)
        cached.restore(block, "b1")  # the block: a complete prefix of the next prompt
        after = cached.complete(then, GREEDY, slot=0, n_probs=3)
        assert after.cache_n == block.n_tokens < len(longer)  # the bug: the longer state is not looked up
        assert after.prompt_n == len(then) - block.n_tokens and after.steps == reference.steps
        with cached.answer_slot() as slot:  # the gateway's slot path on this server: the block reused, checked
            slot.restore(block, "b1", keep=block.n_tokens)
            slot.prefill(then[block.n_tokens:])
            steps = [step.token for step in slot.generate(GREEDY)]
            assert (slot.reused_cells, slot.reused_from) == (block.n_tokens, "block")
        expected = [step.token for step in reference.steps]
        assert steps == expected[:len(steps)] and steps


# -- llama.cpp #27052 (its report is #27068): a failed restore corrupts later completions -------


def test_27052_a_failed_restore_leaves_no_damaged_cells_behind(server, block, query):
    """#27052 (closed as a draft; reported again as #27068, open): a restore that fails after
    writing part of the state left those K/V bytes in the cells, and later completions came out
    corrupted or empty until a restart. The pinned build has the fix
    (``llama_kv_cache::state_clear`` zeroes the cells of a failed restore): after a restore that
    wrote NaN into every key row and then refused the values, a plain completion and a graft on
    that slot, in the same process, equal a fresh prefill's tokens and log-probabilities.

    skillgraft's reuse check does not cover this bug: damaged cells are still counted in
    ``cache_n`` (a state with NaN keys that restores gives ``cache_n`` N, then NaN log-probabilities,
    sent as null).
    What covers it is the restart after every failed restore (the next test).

    A slot file cut short in its values is worse on the pinned build: it aborts the server
    (``GGML_ASSERT(nread <= state_size)`` in ``llama_state_seq_load_file``; one cut short in
    its keys is refused cleanly), shown at the end."""
    plain = server.tokenize(PLAIN)
    reference = cold(server, plain)
    reference_graft = cold(server, [*block.tokens, *query])
    (server.slot_dir / "damaged.slot").write_bytes(nan_keys_then_bad_values(block))
    pid = server.pid
    with pytest.raises(ServerError, match="Unable to restore slot"):
        raw_restore(server, "damaged.slot")
    after = server.complete(plain, GREEDY, slot=0, n_probs=3)  # the slot was cleared: nothing reused
    assert (after.cache_n, after.prompt_n) == (0, len(plain)) and after.steps == reference.steps
    graft = server.graft(block, query, "b1", options=GREEDY, n_probs=3)
    assert graft.completion.cache_n == block.n_tokens and graft.completion.steps == reference_graft.steps
    assert server.pid == pid  # the same process throughout

    whole = slot_file_from_block(block.tokens, block.payload)
    (server.slot_dir / "truncated.slot").write_bytes(whole[:-10])  # ten bytes short, in the values
    with pytest.raises(ServerError):
        raw_restore(server, "truncated.slot")
    assert server.exited_within(10)  # aborted by the restore
    assert server.ensure_running() and server.pid != pid
    assert server.graft(block, query, "b1", options=GREEDY, n_probs=3).completion.steps == reference_graft.steps


def test_27052_the_engine_restarts_its_server_after_a_failed_restore_and_answers_right(server, block, query):
    """What skillgraft does when a restore fails: a block is checked (fingerprint, size,
    SHA-256) before its slot file is written, so the server refuses only a file damaged in the
    slot folder after that, or a restore with no room. :meth:`LlamaServerEngine.restore` then
    raises :class:`ServerError`, forgets the file and restarts a server it started (an attached
    one is marked, and refused until it is restarted): the restart is no longer needed against
    #27052 on the pinned build, but it costs about a second and also covers the abort above. The
    next graft writes the file again and equals a fresh prefill. Through the gateway the failed
    restore's request is answered once more after the restart (``Gateway.stream``)."""
    reference = cold(server, [*block.tokens, *query])
    server.restore(block, "b1")  # its slot file is written, and kept for the next restore
    kept = server.slot_dir / (block.sha256 + SLOT_FILE_SUFFIX)
    assert kept.is_file()
    kept.write_bytes(nan_keys_then_bad_values(block))
    pid, restarts = server.pid, server.restarts
    with pytest.raises(ServerError, match="restore of b1 into slot 0 failed: .*Unable to restore slot"):
        server.restore(block, "b1")
    assert server.restarts == restarts + 1 and server.pid != pid and server.alive
    graft = server.graft(block, query, "b1", options=GREEDY, n_probs=3)
    assert (graft.completion.cache_n, graft.completion.prompt_n) == (block.n_tokens, len(query))
    assert graft.completion.steps == reference.steps


def test_27052_nan_cells_are_a_server_error_never_an_answer(server, block, query):
    """Why the restart matters: NaN K/V bytes, once in the cells, spoil every later completion
    (free cells are read by the attention too), and erasing the slot does not clear them. Here a
    state with NaN keys that restores (its types intact) stands in for them; skillgraft never
    restores such a state (its SHA-256 is checked first), but the completions after it are read
    as damaged: null log-probabilities for the sampled token and every top-k token are a
    :class:`DamagedCellsError`, streamed or whole, never an answer, and the server is restarted
    before it serves again, so the next answer is a clean one."""
    data = bytearray(nan_keys_then_bad_values(block))
    at = 12 + 4 * block.n_tokens + 8 + 12 * block.n_tokens + 8  # the first layer's keys (as above)
    for _ in range(30):
        at += 12 + block.n_tokens * struct.unpack_from("<iQ", data, at)[1]
    struct.pack_into("<i", data, at, 1)  # layer 0's values are f16 again: the restore succeeds
    (server.slot_dir / "nan.slot").write_bytes(bytes(data))
    for streamed in (False, True):
        assert raw_restore(server, "nan.slot")["n_restored"] == block.n_tokens
        restarts = server.restarts
        with pytest.raises(DamagedCellsError, match="null log-probabilities"):
            if streamed:
                request = server.completion_request([*block.tokens, *query], GREEDY, slot=0, n_probs=3, stream=True)
                list(server.stream_request(request, None))
            else:
                server.complete([*block.tokens, *query], GREEDY, slot=0, n_probs=3)
        reference = server.graft(block, query, "b1", options=GREEDY, n_probs=3).completion
        assert server.restarts == restarts + 1  # restarted before the next request, not left serving NaN
        assert reference.cache_n == block.n_tokens and all(step.logprob <= 0 for step in reference.steps)