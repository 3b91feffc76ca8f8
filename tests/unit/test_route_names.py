"""Block names the gateway's URL paths cannot reach are refused for new blocks; a block stored
under one before keeps it and is reached by its id."""

from __future__ import annotations

from contextlib import contextmanager
from urllib.parse import quote

import pytest

from tests.required import need

need("fastapi", "skillgraft[serve]")

from fastapi.testclient import TestClient  # noqa: E402

from skillgraft.bundles.transfer import export_bundle, import_bundle  # noqa: E402
from skillgraft.deposit_policy import DepositPolicy  # noqa: E402
from skillgraft.errors import InputError  # noqa: E402
from skillgraft.gateway.app import create_app  # noqa: E402
from skillgraft.gateway.openai_skills import skill_id  # noqa: E402
from skillgraft.gateway.service import Gateway  # noqa: E402
from skillgraft.memory import SkillMemory  # noqa: E402
from skillgraft.memory.route_names import route_problem  # noqa: E402
from skillgraft.testing import FakeEmbedder, FakeEngine, FakePool  # noqa: E402

from .conftest import GIT_MANUAL  # noqa: E402

SKILL_ID = skill_id("some-skill")
# Each refused name and a part of the reason its refusal gives.
REFUSED = {
    "feedback": "lists the routing corrections",
    "feedback/3": "removes a routing correction",
    "feedback/notes": "removes a routing correction",
    "deploy/capture": "tells how the capture",
    SKILL_ID: "OpenAI Skills API",
    f"{SKILL_ID}/content": "OpenAI Skills API",
    f"{SKILL_ID}/versions/1": "OpenAI Skills API",
    ".": "segment '.' or '..'",
    "..": "segment '.' or '..'",
    "./deploy": "segment '.' or '..'",
    "team/../deploy": "segment '.' or '..'",
    "team/.": "segment '.' or '..'",
}
# Names the paths reach, '/' inside included ('%' too, but the test client decodes a path twice).
LEGAL = ["team/deploy", "recall", "capture", "a/b/capture", "/capture", "feedback/a/b", "feedback-notes", "Feedback",
         SKILL_ID.upper(), "skill_0123", "...", ".hidden", "v1.2", "what?", "c#", "a b", "ü/é", "/lead", "trail/",
         "team//deploy"]
ROOTS = ("/v1/skillgraft/skills/", "/v1/skills/")


@contextmanager
def gateway_client(memory: SkillMemory, engine, embedder):
    gateway = Gateway(memory.store.home, FakePool(engine), embedder=embedder)
    app = create_app(gateway, deposits=DepositPolicy(allowed=True, per_minute=10_000))
    try:
        with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as http:
            yield http
    finally:
        gateway.close()


def reaches(http, method: str, root: str, name: str, block_id: str) -> bool:
    reply = http.request(method, root + quote(name, safe="/"))
    return reply.status_code == 200 and reply.json().get("id") == block_id


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_name_no_path_reaches_is_refused_with_its_reason(fake_memory, name):
    with pytest.raises(InputError, match="cannot be used in a URL path") as refused:
        fake_memory.add_manual(name, GIT_MANUAL, capture=False)
    assert REFUSED[name] in str(refused.value) and "choose another name" in str(refused.value)
    assert fake_memory.blocks.list() == []


def test_a_solution_and_a_rename_are_refused_such_a_name_too(fake_memory):
    with pytest.raises(InputError, match="lists the routing corrections"):
        fake_memory.add_solution("What is 17 * 23?", "391", verifier="exact", expected="391", name="feedback")
    block = fake_memory.add_manual("git-squash", GIT_MANUAL, capture=False)
    with pytest.raises(InputError, match="tells how the capture"):
        fake_memory.blocks.rename(block.id, "git/capture")
    assert fake_memory.blocks.get(block.id).name == "git-squash"


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_the_gateway_refuses_creating_such_a_name_as_a_400(fake_memory, fake_engine, fake_embedder, name):
    with gateway_client(fake_memory, fake_engine, fake_embedder) as http:
        reply = http.post("/v1/skillgraft/skills", json={"kind": "manual", "name": name, "text": GIT_MANUAL})
        assert reply.status_code == 400, reply.text
        error = reply.json()["error"]
        assert error["type"] == "invalid_request_error" and REFUSED[name] in error["message"]
        assert http.get("/v1/skillgraft/skills").json()["data"] == []


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_refused_name_is_one_some_path_does_not_reach(fake_memory, fake_engine, fake_embedder, name):
    block, _ = fake_memory.store.put_text(GIT_MANUAL, name=name)  # as an older version stored it
    with gateway_client(fake_memory, fake_engine, fake_embedder) as http:
        reached = [reaches(http, method, root, name, block.id) for method in ("GET", "DELETE") for root in ROOTS]
    assert not all(reached)


@pytest.mark.parametrize("name", LEGAL)
def test_a_legal_name_goes_create_get_delete_over_the_gateway(fake_memory, fake_engine, fake_embedder, name):
    assert route_problem(name) is None
    with gateway_client(fake_memory, fake_engine, fake_embedder) as http:
        reply = http.post("/v1/skillgraft/skills", json={"kind": "manual", "name": name, "text": GIT_MANUAL})
        assert reply.status_code == 201, reply.text
        block_id = reply.json()["id"]
        assert all(reaches(http, "GET", root, name, block_id) for root in ROOTS)
        assert reaches(http, "DELETE", ROOTS[0], name, block_id)
        assert http.get("/v1/skillgraft/skills").json()["data"] == []


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_block_stored_under_an_old_refused_name_is_read_and_deleted_by_id(fake_memory, fake_engine, fake_embedder,
                                                                            name):
    block, _ = fake_memory.store.put_text(GIT_MANUAL, name=name)  # bypassing clean_name, as an older version did
    with gateway_client(fake_memory, fake_engine, fake_embedder) as http:
        for root in ROOTS:
            read = http.get(root + block.id)
            assert read.status_code == 200 and read.json()["name"] == name, read.text
        assert http.get(f"/v1/skillgraft/skills/{block.id}/capture").status_code == 404  # none asked for: no 500
        deleted = http.delete(f"/v1/skillgraft/skills/{block.id}")
        assert deleted.status_code == 200 and deleted.json()["name"] == name, deleted.text
    assert fake_memory.blocks.list() == []


def test_a_bundle_from_an_older_version_keeps_its_names(tmp_path):
    with SkillMemory(tmp_path / "old", engine=FakeEngine(), embedder=FakeEmbedder()) as old:
        manual, _ = old.store.put_text(GIT_MANUAL, name="feedback")
        solution = old.add_solution("What is 17 * 23?", "391", method="print(17 * 23)", verifier="python",
                                    name="math/capture", imported=True)
        export_bundle(old.store, tmp_path / "old.tar")
    with SkillMemory(tmp_path / "new", engine=FakeEngine(), embedder=FakeEmbedder()) as fresh:
        report = import_bundle(fresh, tmp_path / "old.tar")
        assert {b.name for b in report.imported} == {"feedback", "math/capture"}
        assert fresh.blocks.get(manual.id).name == "feedback" and fresh.blocks.get(solution.id).name == "math/capture"
        with pytest.raises(InputError, match="lists the routing corrections"):
            fresh.add_manual("feedback", "Another manual about feedback.", capture=False)
