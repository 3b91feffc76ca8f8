"""LlamaServerEngine against a real llama-server on loopback with SmolLM2.

One server per session (stopped by its PID even when tests fail). ``make test`` builds the
server first (``make server``); without a build these tests are skipped with the reason.
"""

import os
import signal
import struct
import time

import pytest

from skillgraft.core.sampling import SamplingOptions
from skillgraft.engine.llama import KVState, sha256_hex
from skillgraft.errors import (
    BlockIntegrityError,
    ContextOverflowError,
    FingerprintMismatchError,
    InputError,
    ServerError,
    SlotReuseError,
)

from tests.required import require_llama_server

PREFIX = "A git rebase rewrites a branch so that its commits sit on top of another base. " * 6
QUERY = " Question: what does it rewrite?"


@pytest.fixture(scope="session")
def server():
    from skillgraft.server.engine import LlamaServerEngine

    require_llama_server()
    engine = LlamaServerEngine("smollm2-135m")
    try:
        yield engine
    finally:
        engine.close()


@pytest.fixture
def state(server):
    return server.capture(PREFIX)


def slot_files(server):
    return sorted(p.name for p in server.slot_dir.iterdir())


def cold(server, tokens, max_tokens=16, n_probs=8):
    server.erase_slot(0)
    return server.complete(tokens, SamplingOptions(max_tokens), slot=0, n_probs=n_probs, cache_prompt=False)


def test_the_server_runs_the_installed_sources_with_pinned_flags(server, smollm2):
    argv = server.server.argv
    for flag, value in [("-fa", "off"), ("-ctk", "f16"), ("-ctv", "f16"), ("-np", "1"), ("--cache-ram", "0")]:
        assert argv[argv.index(flag) + 1] == value
    assert "--slot-save-path" in argv and argv[argv.index("--host") + 1] == "127.0.0.1"
    assert server.server.build and server.server.pid == server.pid
    # its own process group, this session: scheduled against this process's threads, not as a group of its own
    assert os.getpgid(server.pid) == server.pid and os.getsid(server.pid) == os.getsid(0)
    assert server.fingerprint == smollm2.fingerprint, server.fingerprint.differences(smollm2.fingerprint)


def test_offloaded_layers_give_the_same_fingerprint_in_process_and_through_the_server(server):
    """Each runtime decides its backend by its own llama.cpp's GPU offload: a CPU-only build
    ignores ``-ngl`` and says ``cpu`` in both; a GPU build says ``gpu`` in both."""
    import llama_cpp

    from skillgraft.config import engine_settings
    from skillgraft.engine.llama import Engine
    from skillgraft.server.engine import LlamaServerEngine

    settings = engine_settings(n_gpu_layers=99)
    with Engine("smollm2-135m", settings) as local:
        expected = local.fingerprint
    offloading = LlamaServerEngine("smollm2-135m", settings)
    try:
        assert offloading.fingerprint == expected, offloading.fingerprint.differences(expected)
        assert offloading.fingerprint.id == expected.id
        assert set(offloading.fingerprint.differences(server.fingerprint)) <= {"n_gpu_layers", "backend"}
    finally:
        offloading.close()
    assert expected.backend == ("gpu" if llama_cpp.llama_supports_gpu_offload() else "cpu")


def test_tokenize_and_chat_agree_with_the_in_process_engine(server, smollm2):
    assert server.tokenize(PREFIX) == smollm2.tokenize(PREFIX)
    assert server.tokenize(QUERY, add_bos=False) == smollm2.tokenize(QUERY, add_bos=False)
    messages = [("system", "You are terse."), ("user", "hi")]
    assert server.chat_prompt(messages) == smollm2.chat_prompt(messages)


def test_capture_through_the_server_equals_the_in_process_capture(server, smollm2, state):
    local = smollm2.capture(list(state.tokens))
    assert state.tokens == local.tokens
    assert state.payload == local.payload and state.sha256 == local.sha256
    assert len(state.payload) == server.state_size(state.n_tokens)


def test_graft_through_the_server_reuses_the_block_and_equals_a_cold_prefill(server, state):
    query = server.tokenize(QUERY, add_bos=False)
    graft = server.graft(state, query, "b1", options=SamplingOptions(16), n_probs=8)
    assert graft.completion.cache_n == state.n_tokens and graft.completion.prompt_n == len(query)
    fresh = cold(server, list(state.tokens) + query)
    assert fresh.cache_n == 0 and fresh.prompt_n == state.n_tokens + len(query)
    assert graft.completion.steps == fresh.steps
    assert len(graft.completion.steps) == 16 and len(graft.completion.steps[0].top) == 8


def test_restore_then_save_gives_back_the_blocks_bytes(server, state):
    server.restore(state, "b1")
    tokens, payload = server.save_slot(0)
    assert tokens == state.tokens and payload == state.payload


def test_a_block_captured_in_process_grafts_into_the_server(server, smollm2):
    local = smollm2.capture(PREFIX)
    query = smollm2.tokenize(QUERY, add_bos=False)
    graft = server.graft(local, query, "in-process", options=SamplingOptions(4), n_probs=4)
    assert graft.completion.cache_n == local.n_tokens and graft.completion.prompt_n == len(query)
    smollm2.graft(local, query)
    in_process = [step.token for step in smollm2.generate(SamplingOptions(4))]
    assert list(graft.completion.tokens) == in_process


def test_blocks_from_another_model_or_other_flags_are_refused_before_the_server(server, state, gemma3):
    before = slot_files(server)
    other_model = gemma3.capture("Skill manual: squash commits.")
    with pytest.raises(FingerprintMismatchError, match="gguf_sha256"):
        server.graft(other_model, QUERY)
    for change in ({"n_batch": 256}, {"type_k": "q8_0"}, {"flash_attn": True}, {"kv_unified": True}):
        foreign = KVState(state.tokens, state.payload, state.sha256, state.fingerprint.model_copy(update=change))
        with pytest.raises(FingerprintMismatchError, match=next(iter(change))):
            server.graft(foreign, QUERY)
    assert slot_files(server) == before


@pytest.mark.model
def test_a_block_captured_under_q8_0_is_refused_by_the_f16_server(server):
    from skillgraft.config import engine_settings, kv_type_settings
    from skillgraft.engine.llama import Engine

    with Engine("smollm2-135m", engine_settings(**kv_type_settings("q8_0"))) as q8_0:
        state = q8_0.capture(PREFIX)
    before = slot_files(server)
    with pytest.raises(FingerprintMismatchError, match="type_k") as caught:
        server.graft(state, QUERY)
    assert set(caught.value.differences) == {"type_k", "type_v", "flash_attn"}
    assert slot_files(server) == before


def test_a_corrupted_block_never_reaches_the_server(server, state):
    server.restore(state, "b1")
    before_files, before_slot = slot_files(server), server.save_slot(0)
    flipped = bytearray(state.payload)
    flipped[len(flipped) // 2] ^= 0x01
    corrupt = KVState(state.tokens, bytes(flipped), state.sha256, state.fingerprint)
    truncated = KVState(state.tokens, state.payload[:-4], state.sha256, state.fingerprint)
    wrong_tokens = KVState(state.tokens[:-1], state.payload, state.sha256, state.fingerprint)
    with pytest.raises(BlockIntegrityError, match="SHA-256"):
        server.graft(corrupt, QUERY)
    for bad in (truncated, wrong_tokens):
        with pytest.raises(BlockIntegrityError, match="bytes but"):
            server.graft(bad, QUERY)
    assert slot_files(server) == before_files
    assert server.save_slot(0) == before_slot


def test_a_failed_restore_restarts_the_server_before_it_serves_again(server, state, monkeypatch):
    pid = server.pid
    short = state.payload[: len(state.payload) // 2]
    broken = KVState(state.tokens, short, sha256_hex(short), state.fingerprint)
    monkeypatch.setattr(server, "check_payload", lambda *args, **kwargs: None)
    with pytest.raises(ServerError, match="restore"):
        server.restore(broken, "broken")
    monkeypatch.undo()
    assert server.pid != pid
    graft = server.graft(state, QUERY, "b1")
    assert graft.completion.cache_n == state.n_tokens


def test_a_killed_server_is_restarted_on_the_next_graft(server, state):
    pid = server.pid
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while server._process.alive and time.monotonic() < deadline:
        time.sleep(0.05)
    graft = server.graft(state, QUERY, "b1")
    assert server.pid != pid and graft.completion.cache_n == state.n_tokens


def test_a_slot_taken_by_a_stray_request_is_detected(server, state):
    server.restore(state, "b1")
    server.complete(server.tokenize("An unrelated request from another process."), slot=None)
    with pytest.raises(SlotReuseError, match=f"cache_n \\d+ \\(expected {state.n_tokens} restored cells\\)"):
        server.continue_restored(state, QUERY, "b1")


def test_bad_arguments_are_input_errors(server, state):
    with pytest.raises(InputError):
        server.graft(state, "")
    with pytest.raises(InputError):
        server.graft(state, QUERY, slot=1)
    with pytest.raises(InputError):
        server.capture("")
    with pytest.raises(ContextOverflowError):
        server.capture(list(range(1, server.n_ctx + 8)))


def test_the_window_facts_are_read_from_the_gguf_and_bad_files_are_refused(tmp_path):
    from skillgraft.errors import EngineError
    from skillgraft.engine.gguf import GgufFacts, gguf_facts
    from skillgraft.engine.models import resolve_model

    assert gguf_facts(resolve_model("smollm2-135m")[1]) == GgufFacts(sliding_window=0, context_length=8192)
    assert gguf_facts(resolve_model("gemma3-270m")[1]) == GgufFacts(sliding_window=512, context_length=32768)
    not_gguf = tmp_path / "x.gguf"
    not_gguf.write_bytes(b"NOPE" + bytes(64))
    truncated = tmp_path / "t.gguf"
    truncated.write_bytes(resolve_model("smollm2-135m")[1].read_bytes()[:300])
    huge_string = tmp_path / "h.gguf"
    huge_string.write_bytes(b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, 2**40))
    for path, message in [(not_gguf, "not a GGUF"), (truncated, "ends inside"), (huge_string, "string of")]:
        with pytest.raises(EngineError, match=message):
            gguf_facts(path)


def test_an_answer_slot_streams_the_graft_the_server_completes(server, state):
    query = server.tokenize(QUERY, add_bos=False)
    with server.answer_slot() as slot:
        slot.restore(state, "b1", keep=state.n_tokens)
        slot.prefill(query)
        steps = list(slot.generate(SamplingOptions(6)))
        assert slot.reused_cells == state.n_tokens
    expected = server.graft(state, query, "b1", options=SamplingOptions(6)).completion.tokens
    assert tuple(step.token for step in steps) == expected


def test_an_answer_slot_keeping_part_of_a_block_reuses_only_those_cells(server, state):
    query = server.tokenize(QUERY, add_bos=False)
    keep = state.n_tokens // 2
    with server.answer_slot() as slot:
        slot.restore(state, "b1", keep=keep)
        slot.prefill(query)
        steps = [step.token for step in slot.generate(SamplingOptions(4))]
        assert slot.reused_cells == keep
    fresh = cold(server, list(state.tokens[:keep]) + query, max_tokens=4, n_probs=0).tokens
    if fresh and server.text.is_end_of_generation(fresh[-1]):  # an answer slot ends before it, unstreamed
        fresh = fresh[:-1]
    assert tuple(steps) == tuple(fresh)


def test_an_answer_slot_taken_by_a_stray_request_is_detected(server, state):
    # A slot restores at the last moment, so a stray request before it changes nothing ...
    with server.answer_slot() as slot:
        slot.restore(state, "b1", keep=state.n_tokens)
        server.complete(server.tokenize("An unrelated request from another process."), slot=None)
        slot.prefill(server.tokenize(QUERY, add_bos=False))
        assert list(slot.generate(SamplingOptions(2))) and slot.reused_cells >= state.n_tokens
    # ... and one between the restore and the completion is caught by the reuse check.
    server.restore(state, "b1", slot=0)
    server.complete(server.tokenize("An unrelated request from another process."), slot=None)
    prompt = [*state.tokens, *server.tokenize(QUERY, add_bos=False)]
    request = server.completion_request(prompt, SamplingOptions(2), slot=0, n_probs=1, cache_prompt=True, stream=True)
    with pytest.raises(SlotReuseError, match=f"expected {state.n_tokens} restored cells"):
        list(server.stream_request(request, ("b1", 0, (state.n_tokens, state.n_tokens), len(prompt))))


def test_verify_server_report_holds_on_one_sample(server):
    from skillgraft.server.checks import verify_server

    report = verify_server(server, samples=1, continuation=4, top_k=4)
    assert (report.samples, report.sha_equal, report.argmax_mismatch) == (1, 1, 0)
    assert report.round_trip_equal and report.cache_n_ok
    assert report.negative_control["samples"] == 1 and report.negative_control["sha_equal"] == 0


@pytest.mark.model
def test_cli_verify_through_the_server(server, runner):
    import json

    from skillgraft.cli.main import cli

    result = runner.invoke(cli, ["verify", "--engine", "server", "--samples", "1", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["samples"] == 1 and report["sha_equal"] == 1
    assert report["round_trip_equal"] and report["cache_n_ok"]


def test_a_kept_state_is_staged_in_a_memory_slot_folder_and_its_restore_writes_nothing(server, state, monkeypatch):
    from skillgraft.server.engine import LlamaServerEngine
    from skillgraft.server.scratch import MEMORY_FOLDER, in_memory_folder, memory_root

    assert server.slot_files.in_memory == (memory_root(server.slot_files.max_bytes) is not None)
    assert in_memory_folder(server.slot_dir.parent) == server.slot_files.in_memory
    server.forget_slot_file(state.sha256)
    server.stage_slot_file(state)
    staged = state.sha256 + ".slot" in slot_files(server)
    assert staged == server.slot_files.in_memory
    restore = server.restore(state, slot=0)
    assert restore.n_restored == state.n_tokens and (restore.write_s == 0.0) == staged
    if not server.slot_files.in_memory:
        pytest.skip(f"{MEMORY_FOLDER} has no room for the slot files here: staged nothing, as meant")
    monkeypatch.setenv("SKILLGRAFT_SLOT_FILES", "disk")
    with LlamaServerEngine("smollm2-135m") as on_disk:
        assert not on_disk.slot_files.in_memory and not in_memory_folder(on_disk.slot_dir.parent)
        on_disk.stage_slot_file(state)
        assert slot_files(on_disk) == []
        assert on_disk.restore(state, slot=0).write_s > 0
