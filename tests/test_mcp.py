"""`skillgraft mcp`: the memory's tools called by the MCP SDK's own client over stdio."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

from tests.required import need

need("mcp", "skillgraft[serve]")

ROOT = Path(__file__).resolve().parents[1]
KEPT_ENV = {"PATH", "HOME", "PYTHONPATH", "SKILLGRAFT_LLAMA_SERVER", "SKILLGRAFT_CACHE_DIR"}


@pytest.fixture(scope="module")
def mcp_home(tmp_path_factory, smollm2, embedder):
    from skillgraft.memory import SkillMemory

    from tests.conftest import GIT_MANUAL

    home = tmp_path_factory.mktemp("mcp") / "store"
    with SkillMemory(home, engine=smollm2, embedder=embedder) as memory:
        memory.add_manual("git-squash", GIT_MANUAL, examples=["how do I squash my last commits?"])
        memory.add_solution("What is 17 * 23?", "391", method="print(17 * 23)", verifier="python")
    return home


def call_tools(home: Path, calls: list[tuple[str, dict]], options: tuple[str, ...] = ("--allow-deposits",), *,
               errlog=None) -> tuple[set[str], list]:
    """Start `skillgraft mcp --home HOME OPTIONS...` as an MCP host would and make the calls."""
    from mcp.client import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    env = {key: value for key, value in os.environ.items() if key in KEPT_ENV}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
    params = StdioServerParameters(command=sys.executable, args=["-m", "skillgraft", "mcp", "--home", str(home), *options], env=env)

    async def run():
        async with Client(stdio_client(params, errlog=errlog or sys.stderr)) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            results = [await client.call_tool(name, arguments) for name, arguments in calls]
            return tools, results

    return anyio.run(run)


def test_mcp_tools_answer_the_sdk_client(mcp_home, tmp_path):
    from tests.conftest import GIT_MANUAL

    with open(tmp_path / "stderr.txt", "w+") as errlog:
        tools, (recall, exact, plain, listing, refused, method, corrected) = call_tools(mcp_home, [
            ("recall", {"question": "How do I squash my last three commits with git?"}),
            ("ask", {"question": "what is 17*23"}),
            ("ask", {"question": "what is 17*23", "route": False, "max_tokens": 4}),
            ("list_skills", {}),
            ("add_solution", {"question": "What is 6 * 7?", "answer": "41", "method": "print(6 * 7)"}),
            ("read_skill", {"ref": "What is 17 * 23?"}),
            ("feedback", {"query": "How do I squash my last three commits with git?", "expected": "git-squash"}),
        ], errlog=errlog)
        errlog.seek(0)
        logged = errlog.read()
    assert tools == {"recall", "read_skill", "ask", "add_manual", "add_solution", "list_skills", "feedback"}
    assert corrected.structured_content["kind"] == "none"  # already routed there: nothing to correct
    assert not recall.is_error
    found = recall.structured_content
    assert found["decision"] == "graft" and found["block_name"] == "git-squash"
    assert found["skill"]["text"] == GIT_MANUAL and found["skill"]["examples"] == ["how do I squash my last commits?"]
    assert found["score"] >= found["threshold"] and found["reason"] and found["use"]
    assert found["note"]["decision"] == "text" and found["note"]["routed"] == "graft"
    asked = exact.structured_content
    assert (asked["decision"], asked["routed"], asked["text"], asked["completion_tokens"]) == ("exact", "exact", "391", 0)
    assert asked["block_id"] and asked["prefill_tokens_avoided"] > 0 and asked["gate"] is None
    unrouted = plain.structured_content  # the model alone, although the memory holds the answer
    assert (unrouted["decision"], unrouted["block_id"], unrouted["completion_tokens"]) == ("abstain", None, 4)
    assert "route=False" in unrouted["reason"]
    names = {skill["name"] for skill in listing.structured_content["result"]}
    assert "git-squash" in names and len(names) == 2
    assert refused.is_error  # a wrong answer is verified and refused, never stored
    solution = method.structured_content
    assert (solution["answer"], solution["method"], solution["verifier"]) == ("391", "print(17 * 23)", "python")
    assert "INFO" not in logged and "Processing request" not in logged, logged  # quiet by default


def test_mcp_refuses_a_missing_store_unless_asked_to_create_it(tmp_path):
    from click.testing import CliRunner

    from skillgraft.cli.main import cli

    typo = tmp_path / "stor"
    refused = CliRunner().invoke(cli, ["mcp", "--home", str(typo)])
    assert refused.exit_code == 1 and "--create" in refused.stderr and not typo.exists()
    tools, (listing,) = call_tools(typo, [("list_skills", {})], ("--create",))
    assert "recall" in tools and listing.structured_content["result"] == []
    assert (typo / "catalog.db").is_file()


def test_deposits_are_off_by_default(mcp_home):
    tools, (refused,) = call_tools(mcp_home, [("add_solution", {"question": "q", "answer": "1", "method": "print(1)"})], ())
    assert tools == {"recall", "read_skill", "ask", "list_skills"}
    assert refused.is_error


def test_an_mcp_deposit_cannot_read_the_host(mcp_home):
    """The file oracle through MCP: a method that reads /etc/machine-id, /etc/passwd or the
    store's catalog finds nothing, so "hidden" is what it verifies (and a second deposit within
    the minute is refused)."""
    paths = ["/etc/machine-id", "/etc/passwd", str(mcp_home / "catalog.db"), str(mcp_home)]
    method = (
        "seen = []\n"
        f"for path in {paths!r}:\n"
        "    try:\n        seen.append(open(path, 'rb').read(8))\n    except OSError:\n        pass\n"
        "print('hidden' if not seen else seen)\n"
    )
    _, (stored, rated) = call_tools(mcp_home, [
        ("add_solution", {"question": "Which host files can a method read?", "answer": "hidden", "method": method}),
        ("add_solution", {"question": "What is 5 + 5?", "answer": "10", "method": "print(10)"}),
    ], ("--allow-deposits", "--deposits-per-minute", "1"))
    assert not stored.is_error, stored.content[0].text
    assert stored.structured_content["answer"] == "hidden"
    assert rated.is_error and "deposits a minute" in rated.content[0].text
