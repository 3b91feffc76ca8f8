"""Skill-first routing on the real encoder: a few public skills of the benchmark's catalog."""

from pathlib import Path

from skillgraft.bench.route_catalog import read_catalog, write_skill_folders
from skillgraft.memory import SkillMemory
from skillgraft.testing import FakeEngine

CATALOG = Path(__file__).parent.parent / "benchmarks" / "data" / "skill_catalog.jsonl"
PICKED = ("algorithmic-art", "webapp-testing", "mcp-builder", "brand-guidelines", "claude-api", "slack-gif-creator")


def test_requests_reach_their_skill_and_small_talk_abstains(tmp_path, embedder):
    rows = [r for r in read_catalog(CATALOG) if r["name"] in PICKED]
    assert len(rows) == len(PICKED)
    write_skill_folders(rows, tmp_path / "skills")
    with SkillMemory(tmp_path / "home", engine=FakeEngine(n_ctx=16_384), embedder=embedder) as memory:
        memory.skills.import_folders(tmp_path / "skills")
        routed = memory.route("test my local web app in a browser with playwright")
        assert routed.decision == "graft" and memory.skills.of_block(routed.block_id) == "webapp-testing"
        routed = memory.route("make an animated gif for slack")
        assert routed.decision == "graft" and memory.skills.of_block(routed.block_id) == "slack-gif-creator"
        for query in ("hi, how are you today?", "what's the capital of australia"):
            assert memory.route(query).decision == "abstain", query
