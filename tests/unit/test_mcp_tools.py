"""The MCP tools over the fakes, called in-process by the SDK's own client."""

from __future__ import annotations

import anyio
import pytest

pytest.importorskip("mcp")

from skillgraft.gateway.mcp import build_server  # noqa: E402
from skillgraft.verify.sandbox import SandboxRun  # noqa: E402
from skillgraft.verify.verifiers import PythonVerifier  # noqa: E402

from .conftest import GIT_MANUAL  # noqa: E402


def _call(memory, name: str, arguments: dict):
    from mcp import Client

    async def run():
        async with Client(build_server(memory)) as client:
            return await client.call_tool(name, arguments)

    return anyio.run(run)


@pytest.mark.parametrize(
    "name, arguments, message",
    [
        ("recall", {"question": "a\x00b"}, "NUL"),
        ("ask", {"question": "hi", "system": "x" * 20_000}, "tokens but the context holds"),
        ("add_manual", {"name": "big", "text": "x" * 100_000}, "manual 'big'"),
        ("add_manual", {"name": "git-squash", "text": "other text"}, "is taken by block"),
        ("add_solution", {"question": "What is 2+2?", "answer": " ", "method": "print(4)"}, "the answer is empty"),
    ],
)
def test_a_refused_call_says_why(fake_memory, name, arguments, message):
    fake_memory.add_manual("git-squash", GIT_MANUAL)
    result = _call(fake_memory, name, arguments)
    assert result.is_error
    assert message in result.content[0].text
    assert [b.name for b in fake_memory.list()] == ["git-squash"]


@pytest.mark.parametrize(
    "run",
    [
        SandboxRun(0, "MARKER read from a file of this host\n", "", 0.1),
        SandboxRun(1, "", "Traceback ...\nSystemExit: MARKER read from a file of this host\n", 0.1),
    ],
)
def test_a_refused_solution_never_shows_the_client_what_its_method_printed(fake_memory, monkeypatch, run):
    monkeypatch.setattr(PythonVerifier, "execute", lambda self, code: run)
    result = _call(fake_memory, "add_solution", {"question": "What is 2+2?", "answer": "4", "method": "print(4)"})
    assert result.is_error and "not verified" in result.content[0].text
    assert "MARKER" not in result.content[0].text
    assert fake_memory.list() == []
