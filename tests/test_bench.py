"""The benchmarks run and report what they claim, on tiny sizes (the numbers live in docs/)."""

import json

import pytest

from skillgraft import bench
from skillgraft.cli.main import cli

pytestmark = pytest.mark.model


def test_graft_rows_have_the_promised_keys_and_consistent_ratios(tmp_path, smollm2):
    report = bench.bench_graft("smollm2-135m", [64], repeats=1, peers=True)
    row = report["rows"][0]
    for key in ("tokens", "prefill_s", "restore_s", "restore_plus_one_s", "floor_s", "speedup", "restore_vs_floor",
                "vs_llama_cpp_python_load_state", "bytes", "bytes_per_token"):
        assert key in row
    assert row["speedup"] == row["prefill_s"] / row["restore_plus_one_s"]
    assert row["first_access_digest"] == "BLAKE3" and row["restore_first_access_s"] > row["restore_s"]
    low, high = row["first_access_vs_floor_range"]
    assert low <= row["first_access_vs_floor"] <= high
    assert row["bytes"] == smollm2.state_size(64) and row["llama_cpp_python_scores_bytes"] > 0
    assert report["machine"]["llama_cpp_python"]


def test_graft_under_q8_0_is_exact_smaller_and_says_its_cache_type(smollm2):
    report = bench.bench_graft("smollm2-135m", [64], repeats=2, peers=True, kv_type="q8_0")
    assert (report["type_k"], report["type_v"], report["flash_attn"]) == ("q8_0", "q8_0", True)
    row = report["rows"][0]
    assert row["exact"] is True and row["bytes"] < 0.6 * smollm2.state_size(64)
    low, high = row["prefill_range_s"]
    assert low <= row["prefill_s"] <= high and row["restore_range_s"][0] <= row["restore_s"]
    assert row["llama_cpp_python_state_bytes"] < 0.6 * smollm2.state_size(64)  # the peer runs under q8_0 too


def test_positions_own_position_exact_and_shift_not(tmp_path):
    rows = {(r["case"], r["offset"]): r for r in bench.bench_positions("smollm2-135m", samples=1, offsets=(8,))["rows"]}
    assert rows[("own position", 0)]["sha_equal"] == 1
    assert rows[("shifted graft vs fresh at offset", 8)]["sha_equal"] == 0


def test_route_and_paging(tmp_path):
    route = bench.bench_route([500], queries=10)
    assert {r["index"] for r in route["rows"]} == {"flat", "hnsw"}
    assert all(0 <= r["recall_at_1_vs_flat"] <= 1 for r in route["rows"])
    assert route["embedder_runtime"] == "onnx"
    assert all(r["route_p50_ms"] > r["search_p50_ms"] and r["route_p99_ms"] >= r["route_p50_ms"] for r in route["rows"])
    paging = bench.bench_paging("smollm2-135m", [64], repeats=1)["rows"][0]
    assert paging["first_access_s"] > 0 and paging["warm_restore_s"] > 0


def test_needles_store_exceeds_the_window(tmp_path):
    report = bench.bench_needles("smollm2-135m", blocks=8, block_tokens=160, window=320)
    assert report["stored_tokens"] > 2 * report["window"] and report["asked"] == len(bench.NEEDLES)
    assert report["routed_right"] >= 5


def test_cli_bench_writes_json_and_a_plot(runner, tmp_path):
    plot = tmp_path / "graft.png"
    result = runner.invoke(cli, ["bench", "graft", "--tokens", "32", "--repeats", "1", "--no-peers", "--json", "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["rows"][0]["tokens"] == 32
    assert plot.read_bytes()[:4] == b"\x89PNG"
