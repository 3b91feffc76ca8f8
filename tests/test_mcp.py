"""`skillgraft mcp`: the memory's tools called by the MCP SDK's own client over stdio."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def mcp_home(tmp_path_factory, smollm2, embedder):
    from skillgraft.memory import SkillMemory

    from tests.conftest import GIT_MANUAL

    home = tmp_path_factory.mktemp("mcp") / "store"
    with SkillMemory(home, engine=smollm2, embedder=embedder) as memory:
        memory.add_manual("git-squash", GIT_MANUAL, examples=["how do I squash my last commits?"])
        memory.add_solution("What is 17 * 23?", "391", method="print(17 * 23)", verifier="python")
    return home


def _call_tools(home: Path, calls: list[tuple[str, dict]]) -> tuple[set[str], list]:
    from mcp.client import Client
    from mcp.client.stdio import StdioServerParameters

    env = {key: value for key, value in os.environ.items() if key in {"PATH", "HOME", "PYTHONPATH", "SKILLGRAFT_LLAMA_SERVER", "SKILLGRAFT_CACHE_DIR"}}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
    params = StdioServerParameters(command=sys.executable, args=["-m", "skillgraft", "mcp", "--home", str(home)], env=env)

    async def run():
        async with Client(params) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            results = [await client.call_tool(name, arguments) for name, arguments in calls]
            return tools, results

    return anyio.run(run)


def test_mcp_tools_answer_the_sdk_client(mcp_home):
    tools, (recall, exact, listing, refused) = _call_tools(mcp_home, [
        ("recall", {"question": "How do I squash my last three commits with git?"}),
        ("ask", {"question": "what is 17*23"}),
        ("list_skills", {}),
        ("add_solution", {"question": "What is 6 * 7?", "answer": "41", "method": "print(6 * 7)"}),
    ])
    assert tools == {"recall", "ask", "add_manual", "add_solution", "list_skills"}
    assert not recall.is_error
    assert recall.structured_content["decision"] == "graft"
    assert recall.structured_content["block_name"] == "git-squash"
    assert exact.structured_content["decision"] == "exact" and exact.structured_content["text"] == "391"
    names = {skill["name"] for skill in listing.structured_content["result"]}
    assert "git-squash" in names and len(names) == 2
    assert refused.is_error  # a wrong answer is verified and refused, never stored
