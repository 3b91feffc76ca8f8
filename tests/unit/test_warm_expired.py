"""A warm of an expired manual or skill is refused before it starts, as a missing one is: the
same 404 and error code through the gateway, :class:`ExpiredError` (a BlockNotFoundError) from
the memory; nothing is started, listed or captured."""

from __future__ import annotations

import pytest

from tests.required import need

need("fastapi", "skillgraft[serve]")

from fastapi.testclient import TestClient  # noqa: E402

from skillgraft.deposit_policy import DepositPolicy  # noqa: E402
from skillgraft.errors import BlockNotFoundError, ExpiredError  # noqa: E402
from skillgraft.gateway.app import create_app  # noqa: E402
from skillgraft.gateway.service import Gateway  # noqa: E402
from skillgraft.memory import SkillMemory  # noqa: E402
from skillgraft.testing import FakeEmbedder, FakeEngine, FakePool  # noqa: E402

from .conftest import GIT_MANUAL  # noqa: E402
from .skill_folders import pdf_skill  # noqa: E402
from .test_text_skills import APP  # noqa: E402

WARMS = "/v1/skillgraft/warms"
WRITERS = DepositPolicy(allowed=True, per_minute=1000)
PAST = "2001-01-01"


@pytest.fixture
def home(tmp_path):
    with SkillMemory(tmp_path / "home", engine=FakeEngine(), embedder=FakeEmbedder()) as memory:
        memory.add_manual("git-squash", GIT_MANUAL)
        memory.skills.import_folders(pdf_skill(tmp_path / "skills"))
        memory.apps.add("coder", APP)
        memory.expiry.set("git-squash", PAST)
        memory.expiry.set("pdf", PAST)
    return tmp_path / "home"


@pytest.mark.parametrize("name", ["git-squash", "pdf"])
@pytest.mark.parametrize("app", [None, "coder"])
def test_a_warm_of_an_expired_one_is_a_404_like_a_missing_one(home, name, app):
    engine = FakeEngine()
    gateway = Gateway(home, FakePool(engine), embedder=FakeEmbedder())
    with TestClient(create_app(gateway, deposits=WRITERS), base_url="http://127.0.0.1") as http:
        missing = http.post(WARMS, json={"skills": ["no-such-skill"], "app": app})
        refused = http.post(WARMS, json={"skills": [name], "app": app})
        assert refused.status_code == missing.status_code == 404, refused.text
        error, missing_error = refused.json()["error"], missing.json()["error"]
        assert error.keys() == missing_error.keys() and error["code"] == missing_error["code"] == "skill_not_found"
        assert "expired" in error["message"]
        assert http.get(WARMS).json()["data"] == []
    gateway.close()


@pytest.mark.parametrize("name", ["git-squash", "pdf"])
def test_the_memory_refuses_to_warm_an_expired_one_before_it_starts(home, name):
    with SkillMemory(home, engine=FakeEngine(), embedder=FakeEmbedder()) as memory:
        with pytest.raises(ExpiredError) as raised:
            memory.skills.warm_in_background([name])
        assert isinstance(raised.value, BlockNotFoundError) and raised.value.name == name
        with pytest.raises(ExpiredError):
            memory.skills.warm([name])
        memory.expiry.set(name, None)  # renewed: it warms again
        assert memory.skills.warm_in_background([name]).wait(30) is not None
