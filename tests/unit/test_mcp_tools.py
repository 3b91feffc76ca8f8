"""The MCP tools over the fakes, called in-process by the SDK's own client."""

from __future__ import annotations

import anyio
import pytest

from tests.required import need

need("mcp", "skillgraft[serve]")

from skillgraft.core.answer import AnswerOptions, decision_of  # noqa: E402
from skillgraft.deposit_policy import DepositPolicy  # noqa: E402
from skillgraft.mcp.server import build_server  # noqa: E402
from skillgraft.verify.sandbox import SandboxRun  # noqa: E402
from skillgraft.verify.verifiers import PythonVerifier  # noqa: E402

from .conftest import ANSWER, GIT_MANUAL, GIT_QUERY, OUT_OF_DOMAIN, QUESTION  # noqa: E402


ALLOWED = DepositPolicy(allowed=True)


def _calls(memory, calls: list[tuple[str, dict]], deposits: DepositPolicy = ALLOWED):
    from mcp import Client

    async def run():
        async with Client(build_server(memory, deposits)) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            return tools, [await client.call_tool(name, arguments) for name, arguments in calls]

    return anyio.run(run)


def _call(memory, name: str, arguments: dict):
    return _calls(memory, [(name, arguments)])[1][0]


@pytest.mark.parametrize(
    "name, arguments, message",
    [
        ("recall", {"question": "a\x00b"}, "NUL"),
        ("ask", {"question": "hi", "system": "x" * 20_000}, "tokens but the context holds"),
        ("add_manual", {"name": "big", "text": "x" * 100_000}, "manual 'big'"),
        ("add_manual", {"name": "big", "text": "x" * 100_000}, "split it into parts that fit"),
        ("read_skill", {"ref": "no-such-skill"}, "no-such-skill"),
        ("add_manual", {"name": "git-squash", "text": "other text"}, "is taken by block"),
        ("add_solution", {"question": "What is 2+2?", "answer": " ", "method": "print(4)"}, "the answer is empty"),
    ],
)
def test_a_refused_call_says_why(fake_memory, name, arguments, message):
    fake_memory.add_manual("git-squash", GIT_MANUAL)
    result = _call(fake_memory, name, arguments)
    assert result.is_error
    assert message in result.content[0].text
    assert [b.name for b in fake_memory.blocks.list()] == ["git-squash"]


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
    assert fake_memory.blocks.list() == []


def test_deposit_tools_are_offered_only_when_deposits_are_allowed(fake_memory):
    tools, (refused,) = _calls(fake_memory, [("add_manual", {"name": "n", "text": GIT_MANUAL})], DepositPolicy())
    assert tools == {"recall", "read_skill", "ask", "list_skills"}
    assert refused.is_error and fake_memory.blocks.list() == []
    tools, _ = _calls(fake_memory, [])
    assert tools == {"recall", "read_skill", "ask", "list_skills", "add_manual", "add_solution", "feedback"}


def test_deposits_are_rate_limited_per_client(fake_memory):
    calls = [("add_manual", {"name": f"manual-{i}", "text": f"{GIT_MANUAL} Part {i}."}) for i in range(3)]
    _, results = _calls(fake_memory, calls, DepositPolicy(allowed=True, per_minute=2))
    assert [result.is_error for result in results] == [False, False, True]
    assert "deposits a minute" in results[2].content[0].text
    assert sorted(b.name for b in fake_memory.blocks.list()) == ["manual-0", "manual-1"]


def test_a_host_reads_a_skills_text_and_the_recalled_skill(fake_stocked):
    manual = _call(fake_stocked, "read_skill", {"ref": "git-squash"}).structured_content
    assert (manual["kind"], manual["text"]) == ("manual", GIT_MANUAL)
    solution = _call(fake_stocked, "read_skill", {"ref": QUESTION}).structured_content
    assert (solution["answer"], solution["method"], solution["verifier"]) == (ANSWER, "17 * 23", "exact")
    recalled = _call(fake_stocked, "recall", {"question": GIT_QUERY}).structured_content
    assert recalled["decision"] == "graft" and recalled["skill"]["text"] == GIT_MANUAL
    assert recalled["block_name"] == "git-squash" and recalled["use"] and recalled["reason"]
    exact = _call(fake_stocked, "recall", {"question": "what is 17*23"}).structured_content
    assert exact["decision"] == "exact" and exact["answer"] == ANSWER


def test_feedback_corrects_the_router_and_says_what_it_did(fake_stocked):
    query = "knead the dough and let it rise"
    result = _call(fake_stocked, "feedback", {"query": query, "expected": "sourdough"})
    assert not result.is_error
    data = result.structured_content
    assert data["kind"] == "feedback" and data["block_id"] == fake_stocked.blocks.get("sourdough").id
    assert fake_stocked.route(query).block.name == "sourdough"
    from skillgraft.routing.feedback import list_corrections

    assert list_corrections(fake_stocked)[0].created_by == "mcp"
    refused = _call(fake_stocked, "feedback", {"query": "What is 17 * 23?", "expected": None})
    assert refused.is_error and "verified question" in refused.content[0].text


PLAIN_REPLY = "I can help with that."
ASKED = {"exact": QUESTION, "graft": GIT_QUERY, "abstain": OUT_OF_DOMAIN, "fallback": GIT_QUERY}


@pytest.mark.parametrize("decision", sorted(ASKED))
def test_ask_returns_the_pipelines_answer_and_note_whatever_it_decided(fake_stocked, fake_engine, decision):
    """A fallback (here an enforced gate refusing an unsure graft) is an answer like any other:
    its text and the pipeline's note, as the memory itself gives them."""
    if decision == "fallback":
        fake_stocked.gate = "enforce"
        fake_engine.reply = lambda prompt: None if "squashing commits" in prompt else PLAIN_REPLY
    else:
        fake_engine.reply = lambda prompt: "Run git rebase -i." if "squashing commits" in prompt else PLAIN_REPLY
    result = _call(fake_stocked, "ask", {"question": ASKED[decision], "max_tokens": 16})
    assert not result.is_error, result.content[0].text
    asked = dict(result.structured_content)
    direct = fake_stocked.answer([("user", ASKED[decision])], AnswerOptions(max_tokens=16))
    assert (asked.pop("text"), asked.pop("completion_tokens")) == (direct.text, direct.end.completion_tokens)
    assert decision_of(asked) == decision_of(direct.note) and asked["decision"] == decision
    if decision == "fallback":
        assert (asked["routed"], asked["block_name"]) == ("graft", "git-squash") and asked["gate"]["fell_back"]
        assert asked["reason"].startswith("graft not confident")


@pytest.mark.parametrize("question", [QUESTION, GIT_QUERY])
def test_ask_without_routing_answers_plainly_as_the_memory_does(fake_stocked, fake_engine, question):
    """``route: false`` is the memory's own ``route=False``: no verified answer, no graft."""
    from skillgraft.core.planning import NOT_ROUTED

    fake_engine.reply = lambda prompt: "Run git rebase -i." if "squashing commits" in prompt else PLAIN_REPLY
    asked = dict(_call(fake_stocked, "ask", {"question": question, "max_tokens": 64, "route": False}).structured_content)
    direct = fake_stocked.answer([("user", question)], AnswerOptions(max_tokens=64), route=False)
    assert (asked.pop("text"), asked.pop("completion_tokens")) == (direct.text, direct.end.completion_tokens)
    assert direct.text == PLAIN_REPLY
    assert (asked["decision"], asked["routed"], asked["block_id"]) == ("abstain", "abstain", None)
    assert asked["reason"] == NOT_ROUTED
    routed = _call(fake_stocked, "ask", {"question": question, "max_tokens": 16}).structured_content
    assert routed["decision"] in ("exact", "graft")


def test_recall_reports_the_note_of_handing_the_skill_over(fake_stocked):
    recalled = _call(fake_stocked, "recall", {"question": GIT_QUERY}).structured_content
    note = recalled["note"]
    assert (note["decision"], note["routed"], note["block_id"]) == ("text", "graft", recalled["block_id"])
    assert (note["score"], note["reason"]) == (recalled["score"], recalled["reason"])
    exact = _call(fake_stocked, "recall", {"question": QUESTION}).structured_content
    assert (exact["note"]["decision"], exact["decision"]) == ("exact", "exact")


def test_the_results_schemas_carry_the_notes_fields(fake_stocked):
    from mcp import Client

    async def run():
        async with Client(build_server(fake_stocked)) as client:
            return {tool.name: tool.output_schema for tool in (await client.list_tools()).tools}

    schemas = anyio.run(run)
    note_fields = {"decision", "routed", "block_id", "block_name", "score", "threshold", "reason", "cache_n", "reused_from",
                   "prefill_tokens_avoided", "near_miss", "gate", "conversation", "skills"}
    assert set(schemas["ask"]["properties"]) == note_fields | {"text", "completion_tokens"}
    assert "fallback" in schemas["ask"]["properties"]["decision"]["enum"]
    assert {"note", "decision", "block_id", "score", "use", "skill"} <= set(schemas["recall"]["properties"])


def test_imported_skills_are_skill_resources_with_their_manifest(fake_memory, tmp_path):
    import json

    from mcp import Client

    from .skill_folders import pdf_skill

    folder = pdf_skill(tmp_path / "skills")
    fake_memory.skills.import_folders(folder)

    async def run():
        async with Client(build_server(fake_memory, DepositPolicy())) as client:
            listed = await client.list_resources()
            index = await client.read_resource("skill://index.json")
            skill_md = await client.read_resource("skill://pdf/SKILL.md")
            forms = await client.read_resource("skill://pdf/references/forms.md")
            logo = await client.read_resource("skill://pdf/assets/logo.png")
            refused = []
            for uri in ("skill://pdf/../../etc/passwd", "skill://pdf/nope.md", "skill://other/SKILL.md"):
                try:
                    await client.read_resource(uri)
                except Exception as exc:  # the SDK's error for a refused read
                    refused.append(str(exc))
            return listed, index, skill_md, forms, logo, refused

    listed, index, skill_md, forms, logo, refused = anyio.run(run)
    # a host without the extension finds each skill by its SKILL.md in resources/list
    assert {str(r.uri): (r.name, r.mime_type) for r in listed.resources} == {
        "skill://index.json": ("skill_index", "application/json"), "skill://pdf/SKILL.md": ("pdf", "text/markdown")}
    [entry] = json.loads(index.contents[0].text)["skills"]
    assert entry["name"] == "pdf" and entry["uri"] == "skill://pdf/SKILL.md"
    assert {f["path"]: f["sha256"] for f in entry["files"]} == {f["path"]: f["sha256"] for f in fake_memory.skills.get("pdf").files}
    assert skill_md.contents[0].text == (folder / "SKILL.md").read_text()
    assert forms.contents[0].text == (folder / "references" / "forms.md").read_text()
    import base64

    assert base64.b64decode(logo.contents[0].blob) == (folder / "assets" / "logo.png").read_bytes()
    assert len(refused) == 3


def _skills_requests():
    """The Skills extension's ``skills/list`` and ``skills/get`` requests, and the latter's params."""
    from typing import Literal

    from mcp_types import PaginatedRequest, Request, RequestParams

    class ListSkills(PaginatedRequest[Literal["skills/list"]]):
        method: Literal["skills/list"] = "skills/list"

    class GetParams(RequestParams):
        uri: str

    class GetSkill(Request[GetParams, Literal["skills/get"]]):
        method: Literal["skills/get"] = "skills/get"
        params: GetParams

    return ListSkills, GetParams, GetSkill


def test_the_skills_extension_lists_and_gets_skills_with_their_manifest(fake_memory, tmp_path):
    from mcp import Client
    from mcp.shared.exceptions import MCPError
    from mcp_types import PaginatedRequestParams
    from pydantic import TypeAdapter

    from skillgraft.mcp.skills_extension import EXTENSION_ID

    from .skill_folders import git_skill, pdf_skill

    pdf_skill(tmp_path / "skills")
    git_skill(tmp_path / "skills")
    fake_memory.skills.import_folders(tmp_path / "skills")

    ListSkills, GetParams, GetSkill = _skills_requests()

    result = TypeAdapter(dict)

    async def run():
        async with Client(build_server(fake_memory, DepositPolicy())) as client:
            declared = client.server_capabilities.extensions or {}
            listed = await client.session.send_request(ListSkills(params=PaginatedRequestParams()), result)
            got = await client.session.send_request(GetSkill(params=GetParams(uri="skill://pdf/SKILL.md")), result)
            refused = []
            for uri in ("skill://nope/SKILL.md", "skill://pdf/references/forms.md", "https://x/SKILL.md"):
                try:
                    await client.session.send_request(GetSkill(params=GetParams(uri=uri)), result)
                except MCPError as exc:
                    refused.append(exc.error.code)
            read = await client.read_resource(got["skill"]["resources"][0]["uri"])
            return declared, listed, got, refused, read

    declared, listed, got, refused, read = anyio.run(run)
    assert declared.get(EXTENSION_ID) == {}
    assert [entry["frontmatter"]["name"] for entry in listed["skills"]] == ["git-squash", "pdf"]
    assert "nextCursor" not in listed and listed["ttlMs"] > 0
    entry = got["skill"]
    assert entry == next(e for e in listed["skills"] if e["uri"] == "skill://pdf/SKILL.md")
    record = fake_memory.skills.get("pdf")
    assert {r["uri"]: (r["digest"], r["size"]) for r in entry["resources"]} == {
        f"skill://pdf/{f['path']}": (f"sha256:{f['sha256']}", f["size"]) for f in record.files}
    assert entry["frontmatter"]["license"] == "Apache-2.0" and entry["frontmatter"]["description"] == record.description
    assert refused == [-32602] * 3
    assert read.contents[0].uri == entry["resources"][0]["uri"]


def test_an_expired_skill_is_neither_listed_nor_read_over_mcp_as_the_gateway_hides_it(fake_memory, tmp_path):
    from mcp import Client
    from mcp.shared.exceptions import MCPError
    from mcp_types import PaginatedRequestParams
    from pydantic import TypeAdapter

    from .skill_folders import git_skill, pdf_skill

    pdf_skill(tmp_path / "skills")
    git_skill(tmp_path / "skills")
    fake_memory.skills.import_folders(tmp_path / "skills")
    fake_memory.expiry.set("pdf", "2000-01-01T00:00:00Z")

    ListSkills, GetParams, GetSkill = _skills_requests()

    async def run():
        async with Client(build_server(fake_memory, DepositPolicy())) as client:
            listed = await client.session.send_request(ListSkills(params=PaginatedRequestParams()), TypeAdapter(dict))
            resources = await client.list_resources()
            refused = []
            try:
                await client.session.send_request(GetSkill(params=GetParams(uri="skill://pdf/SKILL.md")), TypeAdapter(dict))
            except MCPError as exc:
                refused.append(exc.error.code)
            for uri in ("skill://pdf/SKILL.md", "skill://pdf/references/forms.md"):
                try:
                    await client.read_resource(uri)
                except Exception as exc:  # the SDK's error for a refused read
                    refused.append(type(exc).__name__)
            kept = await client.read_resource("skill://git-squash/SKILL.md")
            return listed, resources, refused, kept

    listed, resources, refused, kept = anyio.run(run)
    assert [entry["frontmatter"]["name"] for entry in listed["skills"]] == ["git-squash"]
    assert "skill://pdf/SKILL.md" not in {str(r.uri) for r in resources.resources}
    assert len(refused) == 3 and refused[0] == -32602
    assert kept.contents[0].text.startswith("---")
    assert fake_memory.skills.names() == ["git-squash"] and fake_memory.skills.names(include_expired=True) == ["git-squash", "pdf"]
