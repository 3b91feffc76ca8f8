"""The OpenAI Skills API on the gateway, driven by the real ``openai`` client over the app on
the fakes (its HTTP calls handed to a test client): create, list, retrieve, update, delete,
content and versions; hostile uploads each a 4xx that stores nothing."""

from __future__ import annotations

import io
import zipfile

import httpx
import pytest

from tests.required import need

openai = need("openai", "skillgraft[dev]")
need("fastapi", "skillgraft[serve]")

from fastapi.testclient import TestClient  # noqa: E402

from skillgraft.deposit_policy import DepositPolicy  # noqa: E402
from skillgraft.gateway.app import create_app  # noqa: E402
from skillgraft.gateway.openai_skills import skill_id  # noqa: E402
from skillgraft.gateway.service import Gateway  # noqa: E402
from skillgraft.testing import FakePool  # noqa: E402

from .conftest import GIT_MANUAL  # noqa: E402
from .skill_uploads import HOSTILE, PDF, SKILL, files, skill_md, zipped  # noqa: E402


@pytest.fixture
def served(fake_memory, fake_engine, fake_embedder):
    """``(openai client, test client, gateway)`` over a fresh store that takes deposits."""
    fake_memory.add_manual("git-squash", GIT_MANUAL)
    gateway = Gateway(fake_memory.store.home, FakePool(fake_engine), embedder=fake_embedder)
    app = create_app(gateway, deposits=DepositPolicy(allowed=True, per_minute=10_000))
    with TestClient(app, base_url="http://127.0.0.1") as http:
        def forward(request):
            reply = http.request(request.method, str(request.url), content=request.read(),
                                 headers=[(k, v) for k, v in request.headers.raw])
            return httpx.Response(reply.status_code, headers=reply.headers.raw, content=reply.content)

        transport = httpx.MockTransport(forward)
        client = openai.OpenAI(base_url="http://127.0.0.1/v1", api_key="unused", max_retries=0,
                               http_client=httpx.Client(transport=transport))
        yield client, http, gateway
    gateway.close()


def test_create_list_retrieve_content_update_and_delete(served):
    client, http, gateway = served
    created = client.skills.create(files=files(PDF))
    assert (created.id, created.name, created.object) == (skill_id("pdf"), "pdf", "skill")
    assert (created.default_version, created.latest_version, created.description) == (
        "1", "1", "Read, fill and merge PDF files.")
    assert created.created_at > 0
    assert [s.id for s in client.skills.list()] == [created.id]
    assert client.skills.retrieve(created.id) == created
    record = gateway.memory.skills.get("pdf")
    assert record.folder.startswith("upload:") and "scripts/merge.py" in record.scripts

    archive = zipfile.ZipFile(io.BytesIO(client.skills.content.retrieve(created.id).read()))
    assert {name: archive.read(name) for name in archive.namelist()} == PDF

    changed = {**PDF, "pdf/SKILL.md": skill_md("pdf", "Read, fill, merge and split PDF files.")}
    second = client.skills.versions.create(created.id, files=files(changed))
    assert (second.object, second.version, second.skill_id) == ("skill.version", "2", created.id)
    assert client.skills.retrieve(created.id).default_version == "2"
    assert [v.version for v in client.skills.versions.list(created.id)] == ["2", "1"]
    assert [v.version for v in client.skills.versions.list(created.id, order="asc")] == ["1", "2"]
    assert client.skills.versions.retrieve("1", skill_id=created.id).description == "Read, fill and merge PDF files."
    again = client.skills.versions.create(created.id, files=files(changed))
    assert again.version == "2"  # the same files are the same version

    updated = client.skills.update(created.id, default_version="1")
    assert (updated.default_version, updated.latest_version) == ("1", "2")
    old = zipfile.ZipFile(io.BytesIO(client.skills.versions.content.retrieve("1", skill_id=created.id).read()))
    assert old.read("pdf/SKILL.md") == PDF["pdf/SKILL.md"]

    gone = client.skills.versions.delete("2", skill_id=created.id)
    assert (gone.object, gone.deleted, gone.version) == ("skill.version.deleted", True, "2")
    assert client.skills.retrieve(created.id).latest_version == "1"
    deleted = client.skills.delete(created.id)
    assert (deleted.id, deleted.deleted, deleted.object) == (created.id, True, "skill.deleted")
    with pytest.raises(openai.NotFoundError):
        client.skills.retrieve(created.id)
    assert list(client.skills.list()) == []
    assert [b.name for b in gateway.memory.blocks.list()] == ["git-squash"]  # the skill's blocks went with it


def test_a_zip_upload_a_version_kept_aside_and_the_errors_a_client_can_fix(served):
    client, _, _ = served
    created = client.skills.create(files=zipped(PDF))
    assert created.name == "pdf"
    with pytest.raises(openai.ConflictError) as taken:
        client.skills.create(files=files(PDF))
    assert taken.value.code == "skill_exists"
    aside = {**PDF, "pdf/SKILL.md": skill_md("pdf", "A trial description.")}
    trial = client.skills.versions.create(created.id, files=files(aside), default=False)
    assert trial.version == "2" and client.skills.retrieve(created.id).default_version == "1"
    other = {"git/SKILL.md": skill_md("git", "Squash git commits.")}
    with pytest.raises(openai.BadRequestError) as mismatch:
        client.skills.versions.create(created.id, files=files(other))
    assert mismatch.value.code == "name_mismatch"
    with pytest.raises(openai.BadRequestError):
        client.skills.update(created.id, default_version="latest")
    with pytest.raises(openai.NotFoundError):
        client.skills.update(created.id, default_version="9")
    with pytest.raises(openai.NotFoundError):
        client.skills.retrieve(skill_id("no-such-skill"))


def test_the_list_is_paged_as_the_client_expects(served):
    client, http, _ = served
    ids = [client.skills.create(files=files({f"s{n}/SKILL.md": skill_md(f"s{n}", f"Skill number {n}.")})).id
           for n in range(3)]
    first = client.skills.list(limit=2, order="asc")
    assert [s.id for s in first.data] == ids[:2] and first.has_more
    assert [s.id for s in client.skills.list(limit=2, order="asc")] == ids  # the client follows the cursor
    raw = http.get("/v1/skills", params={"limit": 2, "order": "asc", "after": ids[1]}).json()
    assert (raw["object"], [s["id"] for s in raw["data"]], raw["has_more"]) == ("list", ids[2:], False)
    assert (raw["first_id"], raw["last_id"]) == (ids[2], ids[2])
    for bad in ({"limit": 0}, {"limit": 101}, {"order": "up"}, {"after": "skill_nope"}):
        response = http.get("/v1/skills", params=bad)
        assert response.status_code == 400 and response.json()["error"]["param"] == next(iter(bad))


def test_a_forged_version_cursor_is_a_400(served):
    client, http, _ = served
    created = client.skills.create(files=files({"s/SKILL.md": skill_md("s", "A skill.")}))
    path = f"/v1/skills/{created.id}/versions"
    assert [v["version"] for v in http.get(path, params={"after": "1", "order": "desc"}).json()["data"]] == []
    for forged in ("\u00b2", "\u0661", "1" * 5000, "skillver_" + "0" * 32 + "_1", "-1", " 1"):
        response = http.get(path, params={"after": forged})
        assert response.status_code == 400 and response.json()["error"]["param"] == "after", (forged, response.text)


def test_a_json_body_nested_past_the_parser_is_a_400(served):
    _, http, gateway = served
    response = http.post("/v1/skills", content=b"[" * 100_000, headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error", response.text
    assert [b.name for b in gateway.memory.blocks.list()] == ["git-squash"]


def _raw_upload(http, parts: list[tuple[str, bytes]]):
    """A multipart body written by hand: file names exactly as given, control characters and all."""
    boundary = "skillgraft-test-boundary"
    body = b""
    for name, data in parts:
        body += (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files[]\"; filename=\"{name}\"\r\n"
                 "Content-Type: application/octet-stream\r\n\r\n").encode() + data + b"\r\n"
    body += f"--{boundary}--\r\n".encode()
    return http.post("/v1/skills", content=body, headers={"content-type": f"multipart/form-data; boundary={boundary}"})


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_upload_is_a_4xx_that_stores_nothing(served, case):
    client, _, gateway = served
    parts, status, code = HOSTILE[case]
    with pytest.raises(openai.APIStatusError) as refused:
        client.skills.create(files=parts)
    assert (refused.value.status_code, refused.value.code) == (status, code), refused.value.message
    assert refused.value.body["type"] == "invalid_request_error" and refused.value.body["param"] == "files"
    assert gateway.memory.skills.list() == [] and [b.name for b in gateway.memory.blocks.list()] == ["git-squash"]


def test_a_file_name_of_control_characters_is_refused(served):
    _, http, gateway = served
    response = _raw_upload(http, [("pdf/SKILL.md", SKILL), ("pdf/\x01\x02.md", b"x")])
    assert response.status_code == 400, response.text
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    assert gateway.memory.skills.list() == []


def test_uploads_are_deposits_and_skillgraft_json_still_works(served, fake_memory, fake_engine, fake_embedder):
    _, http, _ = served
    manual = {"kind": "manual", "name": "sourdough", "text": "Feed the starter, fold, proof and bake covered."}
    assert http.post("/v1/skills", json=manual).status_code == 201  # the old path, a JSON body
    assert http.post("/v1/skillgraft/skills", json={**manual, "name": "bread", "text": "Knead and bake."}).status_code == 201
    listed = http.get("/v1/skillgraft/skills").json()["data"]
    assert {row["name"] for row in listed} >= {"git-squash", "sourdough", "bread"}
    assert http.get("/v1/skills/sourdough").json()["name"] == "sourdough"  # skillgraft's text of a block
    assert http.post("/v1/skills", json={"kind": "manual"}).status_code == 400
    assert http.post("/v1/skills", content=b"{", headers={"content-type": "application/json"}).status_code == 400
    assert http.post("/v1/skills", content=b"x", headers={"content-type": "text/plain"}).status_code == 400

    gateway = Gateway(fake_memory.store.home, FakePool(fake_engine), embedder=fake_embedder)
    closed = create_app(gateway)
    with TestClient(closed, base_url="http://127.0.0.1") as plain:
        refused = plain.post("/v1/skills", files=[("files[]", ("pdf/SKILL.md", SKILL))])
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "deposits_disabled"
        assert plain.post(f"/v1/skills/{skill_id('pdf')}/versions", files=[("files[]", ("pdf/SKILL.md", SKILL))]
                          ).status_code == 403
        assert plain.get("/v1/skills").json()["object"] == "list"
    gateway.close()
