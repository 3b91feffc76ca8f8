"""Expiry through the gateway on the fakes: the Skills API and skillgraft's own deposits take an
``expires_at``; an expired skill is hidden like a missing one from listing, reading and routing."""

from __future__ import annotations

import pytest

from tests.required import need

need("fastapi", "skillgraft[serve]")

from fastapi.testclient import TestClient  # noqa: E402

from skillgraft.deposit_policy import DepositPolicy  # noqa: E402
from skillgraft.gateway.app import create_app  # noqa: E402
from skillgraft.gateway.openai_skills import skill_id  # noqa: E402
from skillgraft.gateway.service import Gateway  # noqa: E402
from skillgraft.testing import FakePool  # noqa: E402

from .conftest import GIT_MANUAL, GIT_QUERY  # noqa: E402
from .skill_uploads import PDF  # noqa: E402

PAST = "2001-01-01T00:00:00Z"
PDF_QUERY = "How do I merge two PDF files and fill a PDF form?"


@pytest.fixture
def http(fake_memory, fake_engine, fake_embedder):
    gateway = Gateway(fake_memory.store.home, FakePool(fake_engine), embedder=fake_embedder)
    app = create_app(gateway, deposits=DepositPolicy(allowed=True, per_minute=10_000))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        yield client
    gateway.close()


def _routed(http, query: str):
    return http.post("/v1/skillgraft/skills/recall", json={"query": query}).json()["note"]["block_name"]


def test_an_uploaded_skill_expires_and_is_renewed_through_the_skills_api(http):
    upload = [("files[]", (path, data)) for path, data in PDF.items()]
    created = http.post("/v1/skills", files=upload, data={"expires_at": "30d"})
    assert created.status_code == 200, created.text
    sid = created.json()["id"]
    assert sid == skill_id("pdf") and created.json()["expires_at"] > created.json()["created_at"]
    assert _routed(http, PDF_QUERY) is not None

    expired = http.post(f"/v1/skills/{sid}", json={"expires_at": PAST})
    assert expired.status_code == 200 and expired.json()["expires_at"] == 978307200
    assert http.get("/v1/skills").json()["data"] == []
    assert http.get(f"/v1/skills/{sid}").status_code == 404
    assert http.get(f"/v1/skills/{sid}/content").status_code == 404
    assert _routed(http, PDF_QUERY) is None  # routed to nothing: no other skill is stored

    renewed = http.post(f"/v1/skills/{sid}", json={"expires_at": None})
    assert renewed.status_code == 200 and renewed.json()["expires_at"] is None
    assert [s["id"] for s in http.get("/v1/skills").json()["data"]] == [sid]


def test_a_deposit_with_an_expiry_is_hidden_after_it(http):
    deposited = http.post("/v1/skillgraft/skills", json={"kind": "manual", "name": "git-squash", "text": GIT_MANUAL,
                                                        "expires_at": "2030-01-01T00:00:00Z"})
    assert deposited.status_code == 201 and deposited.json()["expires_at"] == "2030-01-01T00:00:00.000+00:00"
    assert _routed(http, GIT_QUERY) == "git-squash"
    again = http.post("/v1/skillgraft/skills", json={"kind": "manual", "name": "git-squash", "text": GIT_MANUAL,
                                                    "expires_at": PAST})
    assert again.status_code == 201 and again.json()["id"] == deposited.json()["id"]
    assert http.get("/v1/skillgraft/skills").json()["data"] == []
    assert http.get("/v1/skillgraft/skills/git-squash").status_code == 404
    assert _routed(http, GIT_QUERY) is None
    assert http.delete("/v1/skillgraft/skills/git-squash").status_code == 200  # deleting it is still possible


@pytest.mark.parametrize("expiry", ["soon", "1000000d", "-1d", "1999-01-01", "x" * 65, 30])
def test_a_malformed_or_absurd_expiry_is_a_400_that_stores_nothing(http, expiry):
    deposit = http.post("/v1/skillgraft/skills", json={"kind": "manual", "name": "git-squash", "text": GIT_MANUAL,
                                                      "expires_at": expiry})
    assert deposit.status_code in (400, 422) and deposit.json()["error"]["type"] == "invalid_request_error"
    upload = [("files[]", (path, data)) for path, data in PDF.items()]
    created = http.post("/v1/skills", files=upload, data={"expires_at": str(expiry)})
    assert created.status_code == 400, created.text
    assert http.get("/v1/skillgraft/skills").json()["data"] == [] and http.get("/v1/skills").json()["data"] == []
    created = http.post("/v1/skills", files=upload)
    assert http.post(f"/v1/skills/{created.json()['id']}", json={"expires_at": str(expiry)}).status_code == 400
    assert http.post(f"/v1/skills/{created.json()['id']}", json={}).status_code == 400


def test_an_update_with_a_bad_expiry_changes_nothing(http):
    upload = [("files[]", (path, data)) for path, data in PDF.items()]
    sid = http.post("/v1/skills", files=upload).json()["id"]
    changed = {**PDF, "pdf/SKILL.md": PDF["pdf/SKILL.md"].replace(b"merge PDF", b"merge and split PDF")}
    http.post(f"/v1/skills/{sid}/versions", files=[("files[]", (p, d)) for p, d in changed.items()])
    refused = http.post(f"/v1/skills/{sid}", json={"default_version": "1", "expires_at": "someday"})
    assert refused.status_code == 400
    assert http.get(f"/v1/skills/{sid}").json()["default_version"] == "2"  # the default did not move
