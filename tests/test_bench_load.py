"""`skillgraft bench load --quick --namespaces`: real servers on loopback (SmolLM2), the gateway
with one and two namespaces and plain llama-server, one after the other. Timings are not compared
here (too short to mean anything); the rows' shape and that nothing failed are."""

from __future__ import annotations

import json

import pytest

from skillgraft.cli.main import cli
from tests.required import require_llama_server


def test_plot_is_refused_before_anything_runs(runner):
    result = runner.invoke(cli, ["bench", "load", "--quick", "--plot", "load.png"])
    assert result.exit_code == 2 and "No such option '--plot'" in result.output


@pytest.mark.slow
@pytest.mark.server
@pytest.mark.model
def test_quick_load_benchmark(runner):
    require_llama_server()
    result = runner.invoke(cli, ["bench", "load", "--model", "smollm2-135m", "--quick", "--namespaces", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["kind"] == "load" and report["quick"] and report["max_tokens"] == 16
    systems = ["skillgraft", "llama-server"] + ["llama-server, tools pasted"] * report["tools_dropped_by_llama_server"][
        "smollm2-135m"] + ["skillgraft, 2 namespaces"]
    assert [r["system"] for r in report["rows"]] == systems
    for row in report["rows"]:
        assert (row["model"], row["slots"], row["agents"], row["turns"]) == ("smollm2-135m", 1, 2, 2)
        assert row["errors"] == 0 and row["warm_up_errors"] == 0, row["error_messages"]
        assert row["requests"] == row["answered"] == 4 and row["completion_tokens"] > 0
        assert 0 < row["ttft_p50_s"] <= row["ttft_p95_s"] and row["requests_per_s"] > 0 and row["tokens_per_s"] > 0
    ours = [r for r in report["rows"] if r["system"].startswith("skillgraft")]
    assert all(sum(r["decisions"].values()) == 4 for r in ours)  # every answer came through the memory
    against = {(c["system"], c["against"]) for c in report["comparisons"]}
    assert {("skillgraft", "llama-server"), ("skillgraft, 2 namespaces", "llama-server")} <= against
    assert all(c["requests_per_s_ratio"] > 0 and isinstance(c["met"], bool) for c in report["comparisons"])
    flags = report["llama_server_argv"]
    assert flags[flags.index("-np") + 1] == "1" and flags[flags.index("-c") + 1] == str(report["n_ctx_per_slot"]["smollm2-135m"]["1"])
