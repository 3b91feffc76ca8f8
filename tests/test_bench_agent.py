"""`skillgraft bench agent --quick`: the gateway and plain llama-server side by side on short
prompts, every scenario once. Timings are not compared here (too short to mean anything); the
report's shape, the decisions and where the gateway's reused cells came from are. `make test`
builds the server first; a missing build fails here under SKILLGRAFT_REQUIRE_SERVER instead of
skipping. The gateway benchmark starts with the module and runs beside its other tests; its
test, last, checks the report.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.required import require_llama_server


class QuickAgentRun:
    """``bench_agent(quick=True, two_slots=True)`` in a thread of its own: its gateway and
    llama-server are processes, and between its requests it mostly waits (on them, and in the
    pauses that let the gateway idle), so the module's other tests run beside it."""

    def __init__(self) -> None:
        from skillgraft.bench.agent import bench_agent

        self.seen: list[tuple[int, int]] = []
        self._thread = ThreadPoolExecutor(1)
        self._future = self._thread.submit(bench_agent, quick=True, repeats=5, two_slots=True,
                                           progress=lambda done, total: self.seen.append((done, total)))

    def report(self) -> tuple[dict, list]:
        """The benchmark's report (its exception, if it failed) and the progress it gave."""
        return self._future.result(), self.seen

    def close(self) -> None:
        self._thread.shutdown(wait=True)


@pytest.fixture(scope="module", autouse=True)
def quick_agent_run(request):
    """The quick gateway benchmark, started with the module when its test is selected and a
    llama-server build is there (the test says why not, otherwise)."""
    from skillgraft.errors import ServerBuildError
    from skillgraft.server.build import find_server

    selected = any(getattr(item, "module", None) is request.module and item.originalname == "test_quick_agent_benchmark"
                   for item in request.session.items)
    try:
        find_server()
    except ServerBuildError:
        selected = False
    run = QuickAgentRun() if selected else None
    try:
        yield run
    finally:
        if run is not None:
            run.close()


def test_plot_is_refused_before_anything_runs(runner):
    from skillgraft.cli.main import cli

    result = runner.invoke(cli, ["bench", "agent", "--quick", "--plot", "agent.png"])
    assert result.exit_code == 2 and "No such option '--plot'" in result.output


@pytest.mark.slow
@pytest.mark.model
def test_quick_in_process_agent_benchmark():
    from skillgraft.bench.agent_local import LOOP_QUESTIONS, bench_agent_local, requests_per_system
    from skillgraft.bench.conversation_policy import TURNS, conversations

    seen: list[tuple[int, int]] = []
    report = bench_agent_local(quick=True, progress=lambda done, total: seen.append((done, total)))
    total = 2 * requests_per_system(quick=True) + 2 * len(conversations()) * 2 * TURNS
    assert report["kind"] == "agent-in-process" and report["other"] == "llama-cpp-python"
    assert len(report["requests"]) == total and seen[-1] == (total, total)
    ours = [r for r in report["requests"] if r["system"] == "skillgraft"]
    theirs = [r for r in report["requests"] if r["system"] == "llama-cpp-python"]
    assert {r["decision"] for r in ours} == {"graft"} and {r["decision"] for r in theirs} == {"pasted"}
    # Both keep what their context held: skillgraft's later questions, turns and loop calls, and Llama's.
    assert all(r["reused_from"] == "slot" and r["cache_n"] > 0 for r in ours if r["round"] > 1)
    assert all(r["cache_n"] > 0 for r in theirs if r["round"] > 1)
    assert len([r for r in ours if r["scenario"] == "tool loop"]) == 2 * len(LOOP_QUESTIONS)
    for row in report["rows"]:
        assert row["skillgraft_s"] > 0 and row["llama_server_s"] > 0
    policies = {row["policy"]: row for row in report["conversation_policy"]["rows"]}
    assert set(policies) == {"keep", "switch"} and policies["switch"]["kept"] == 0
    for row in policies.values():
        assert row["turns"] == len(conversations()) * 2 * TURNS and row["total_s"] > 0
        assert 0 <= row["behind_the_expected_skill"] <= row["turns"]


@pytest.mark.slow
@pytest.mark.server
@pytest.mark.model
def test_placement_shapes_reach_both_real_systems(tmp_path):
    """``bench placement``'s requests on the real systems (short manuals): llama-server takes the
    tools parameter and the pasted skill, the gateway places the routed skill after the tools and,
    asked again, continues what the slot holds of the agent's prompt and tools at least."""
    require_llama_server()
    from skillgraft.bench.agent import GatewaySystem, LlamaServerSystem
    from skillgraft.bench.agent_texts import Texts
    from skillgraft.bench import agent_data as data
    from skillgraft.bench.placement import _Asker, agent_prompt, agent_tools

    texts = Texts(True)
    manuals = {name: texts.manuals[name] for name in ("tls-renewal", "dns-change")}
    question = data.SKILL_QUESTIONS["tls-renewal"]
    server = LlamaServerSystem("smollm2-135m", manuals, cache_mib=8192)
    gateway = GatewaySystem(tmp_path, "smollm2-135m", manuals, settle=texts.settle_threshold)
    try:
        peer, ours = _Asker(server, manuals, agent_tools()), _Asker(gateway, manuals, agent_tools())
        pasted = peer.ask(agent_prompt(), [("tls-renewal", "user", question[0])])
        assert pasted["decision"] == "pasted" and pasted["prompt_tokens"] > 100
        first = ours.ask(agent_prompt(), [("tls-renewal", "user", question[0])])
        assert (first["decision"], first["block"], first["skills"]) == ("graft", "tls-renewal", ["tls-renewal@0"])
        again = ours.ask(agent_prompt(), [("tls-renewal", "user", question[1])])
        assert again["block"] == "tls-renewal" and again["cache_n"] > first["prompt_tokens"] // 2
    finally:
        gateway.stop()
        server.stop()


@pytest.mark.slow
@pytest.mark.server
@pytest.mark.model
def test_quick_agent_benchmark(quick_agent_run):
    """Last in the module: the run started with it and went on beside the tests above."""
    require_llama_server()
    from skillgraft.bench.agent import CONVERSATION, requests_per_system

    report, seen = quick_agent_run.report()
    per_system = requests_per_system(1, two_slots=True, quick=True)  # quick measures one restart whatever repeats says
    assert report["kind"] == "agent" and report["quick"] and report["repeats"] == 1
    assert len(report["requests"]) == 2 * per_system and seen[-1] == (2 * per_system, 2 * per_system)
    assert report["max_tokens"] == 1 and report["prompt_tokens"]["agent"] > 0

    # Every request through the gateway was in-domain and grafted the manual its question is about.
    decisions = report["decisions"]
    assert decisions["ok"], decisions["mismatches"]
    assert decisions["graft_on_expected"] == decisions["requests"] == per_system

    ours = [r for r in report["requests"] if r["system"] == "skillgraft"]
    theirs = [r for r in report["requests"] if r["system"] == "llama-server"]
    assert {r["decision"] for r in theirs} == {"pasted"}
    # Where the reused cells came from: what the slot held for the agent's later questions, a
    # derived state after a restart; in six skills (stored as text, placed after the app's system
    # prompt) the app's prompt and the skill are kept as a derived state at the skill's first
    # request and restored at its later ones (or the slot's app prompt continued).
    assert {r["reused_from"] for r in ours if r["scenario"] == "agent" and r["round"] > 1} == {"slot"}
    assert [r["reused_from"] for r in ours if r["scenario"] == "restart"] == ["derived"]
    later_skills = [r for r in ours if r["scenario"] == "six skills" and r["round"] > 1]
    assert {r["reused_from"] for r in later_skills} <= {"derived", "slot"}
    assert any(r["reused_from"] == "derived" for r in later_skills)
    assert all(r["cache_n"] > 100 for r in later_skills if r["reused_from"] == "derived")
    assert all(r["cache_n"] > 0 for r in theirs if r["scenario"] == "agent" and r["round"] > 1)
    assert [r["round"] for r in ours if r["scenario"] == "conversation"] == list(range(1, len(CONVERSATION) + 1))
    # The gateway's own stage timings, read back from its ledgers, belong to every one of its requests.
    assert all(r["gateway_total_s"] > 0 and r["gateway_recall_s"] is not None for r in ours)

    rows = {(r["scenario"], r["measure"]): r for r in report["rows"]}
    for key in [("agent", "first request"), ("agent", "later requests"), ("restart", "first request after a restart"),
                ("six skills", "round 2"), ("conversation", f"{len(CONVERSATION)} turns, total"),
                ("three apps", "rounds 2-3"), ("three apps, 2 slots", "rounds 2-3")]:
        row = rows[key]
        assert row["skillgraft_s"] > 0 and row["llama_server_s"] > 0 and row["requests"] >= 1
        assert row["ratio"] == pytest.approx(row["skillgraft_s"] / row["llama_server_s"], rel=1e-2)
        assert row["skillgraft_min"] <= row["skillgraft_max"]
    summary = report["summary"]
    assert summary["restart_speedup"] > 0 and isinstance(summary["restart_target_met"], bool)
    assert report["setup"]["gateway_exit_codes"] and set(report["setup"]["gateway_exit_codes"]) == {0}
