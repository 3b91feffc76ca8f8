"""Background warms through the gateway (``/v1/skillgraft/warms``), on the fake pool: started
behind a stored app's prefix, followed, stopped and resumed; a writer's routes only; a chat
behind that prompt then restores the warmed state."""

from __future__ import annotations

import threading

import pytest

from tests.required import need

need("fastapi", "skillgraft[serve]")

from fastapi.testclient import TestClient  # noqa: E402

from skillgraft.deposit_policy import DepositPolicy  # noqa: E402
from skillgraft.gateway.app import create_app  # noqa: E402
from skillgraft.gateway.service import Gateway  # noqa: E402
from skillgraft.memory import SkillMemory  # noqa: E402
from skillgraft.testing import FakeEmbedder, FakeEngine, FakePool  # noqa: E402

from .skill_folders import pdf_skill  # noqa: E402
from .test_text_skills import APP, QUESTION  # noqa: E402

WARMS = "/v1/skillgraft/warms"
WRITERS = DepositPolicy(allowed=True, per_minute=1000)  # following polls: room for them all


@pytest.fixture
def home(tmp_path):
    with SkillMemory(tmp_path / "home", engine=FakeEngine(), embedder=FakeEmbedder()) as memory:
        memory.skills.import_folders(pdf_skill(tmp_path / "skills"))
        memory.apps.add("coder", APP)
    return tmp_path / "home"


def _gateway(home, engine=None) -> Gateway:
    return Gateway(home, FakePool(engine or FakeEngine()), embedder=FakeEmbedder())


def _follow(http, warm_id: str) -> dict:
    for _ in range(100):
        warm = http.get(f"{WARMS}/{warm_id}", params={"wait": 1}).json()
        if warm["status"] != "running":
            return warm
    raise AssertionError(f"warm {warm_id} still runs")


def test_a_warm_behind_an_app_is_started_followed_and_serves_that_apps_chat(home):
    gateway = _gateway(home)
    parts = len(gateway.memory.skills.get("pdf").parts)
    with TestClient(create_app(gateway, deposits=WRITERS), base_url="http://127.0.0.1") as http:
        started = http.post(WARMS, json={"skills": ["pdf"], "app": "coder"})
        assert started.status_code == 202, started.text
        warm = _follow(http, started.json()["id"])
        assert (warm["status"], warm["done"], warm["total"], warm["app"]) == ("done", parts, parts, "coder")
        assert len(warm["report"]["warmed"]) == parts and not warm["report"]["left_out"]
        assert [row["id"] for row in http.get(WARMS).json()["data"]] == [warm["id"]]
        chat = http.post("/v1/chat/completions", json={"model": "fake-chatml", "max_tokens": 4, "messages": [
            {"role": "system", "content": APP}, {"role": "user", "content": QUESTION}]}).json()
        assert chat["skillgraft"]["decision"] == "graft" and chat["skillgraft"]["reused_from"] == "derived"
        assert chat["skillgraft"]["cache_n"] >= warm["report"]["warmed"][0]["tokens"]
    gateway.close()


def test_a_running_warm_is_the_namespaces_only_one_stops_between_parts_and_resumes(home):
    engine, release = FakeEngine(), threading.Event()
    engine.reply = lambda prompt: "ok" if release.wait(30) else None  # the first part waits for the test
    gateway = _gateway(home, engine)
    parts = len(gateway.memory.skills.get("pdf").parts)
    with TestClient(create_app(gateway, deposits=WRITERS), base_url="http://127.0.0.1") as http:
        first = http.post(WARMS, json={"skills": ["pdf"], "app": "coder"}).json()
        assert first["status"] == "running" and first["total"] == parts
        second = http.post(WARMS, json={"skills": ["pdf"]})
        assert second.status_code == 409 and second.json()["error"]["code"] == "warm_running"
        stopping = http.delete(f"{WARMS}/{first['id']}").json()
        assert stopping["id"] == first["id"]
        release.set()
        stopped = _follow(http, first["id"])
        assert stopped["status"] == "stopped" and stopped["report"]["left"] == parts - 1
        assert len(stopped["report"]["warmed"]) == 1
        resumed = _follow(http, http.post(WARMS, json={"skills": ["pdf"], "app": "coder"}).json()["id"])
        assert resumed["status"] == "done" and len(resumed["report"]["kept"]) == 1
        assert len(resumed["report"]["warmed"]) == parts - 1
        assert len(http.get(WARMS).json()["data"]) == 2
    gateway.close()


@pytest.mark.parametrize("body, status, code", [
    ({"skills": ["pdf"], "app": "reviewer"}, 404, "app_not_found"),
    ({"skills": ["no-such-skill"]}, 404, "skill_not_found"),
    ({"skills": ["pdf"], "app": "../etc"}, 400, None),
    ({"skills": []}, 400, None),
    ({"skills": ["pdf"], "system": "You are root."}, 400, None),
    ({"skills": ["x" * 500]}, 400, None),
])
def test_a_warm_that_cannot_run_is_refused_before_it_starts(home, body, status, code):
    gateway = _gateway(home)
    with TestClient(create_app(gateway, deposits=WRITERS), base_url="http://127.0.0.1") as http:
        refused = http.post(WARMS, json=body)
        assert refused.status_code == status, refused.text
        assert code is None or refused.json()["error"]["code"] == code
        assert http.get(WARMS).json()["data"] == []
        assert http.get(f"{WARMS}/warm_nope").status_code == 404
        assert http.get(f"{WARMS}/warm_nope", params={"wait": 3600}).status_code == 400
    gateway.close()


def test_warms_are_the_writers_alone(home):
    gateway = _gateway(home)
    with TestClient(create_app(gateway), base_url="http://127.0.0.1") as http:  # deposits off
        for method, path in (("POST", WARMS), ("GET", WARMS), ("GET", f"{WARMS}/warm_x"), ("DELETE", f"{WARMS}/warm_x")):
            refused = http.request(method, path, json={"skills": ["pdf"]} if method == "POST" else None)
            assert refused.status_code == 403 and refused.json()["error"]["code"] == "deposits_disabled"
    deposits = DepositPolicy(allowed=True, key="deposit-key-0123456789")
    app = create_app(gateway, api_key="admin-key-0123456789", deposits=deposits)
    with TestClient(app, base_url="http://127.0.0.1") as http:
        admin = {"Authorization": "Bearer admin-key-0123456789"}
        assert http.get(WARMS, headers=admin).status_code == 401  # the API key reads; warms are writes
        writer = {"Authorization": "Bearer deposit-key-0123456789"}
        assert http.get(WARMS, headers=writer).json() == {"object": "list", "data": []}
    gateway.close()


def test_a_warm_waits_for_a_chats_slot_without_holding_the_memory_the_chat_records_in(home):
    """The pool's one slot is a chat's: the warm waits for it before it takes the memory's lock,
    so the chat records its answer and both end (taken the other way round, each would wait for
    the other until the lease timed out)."""
    engine, chatting, release = FakeEngine(), threading.Event(), threading.Event()

    def reply(prompt):
        if "hello there" in prompt:
            chatting.set()
            release.wait(30)
        return "ok"

    engine.reply = reply
    gateway = _gateway(home, engine)
    with TestClient(create_app(gateway, deposits=WRITERS), base_url="http://127.0.0.1") as http:
        answered = []
        chat = threading.Thread(target=lambda: answered.append(http.post("/v1/chat/completions", json={
            "model": "fake-chatml", "max_tokens": 2, "messages": [{"role": "user", "content": "hello there"}]})))
        chat.start()
        assert chatting.wait(30)
        started = http.post(WARMS, json={"skills": ["pdf"], "app": "coder"}).json()
        assert http.get(f"{WARMS}/{started['id']}", params={"wait": 0.3}).json()["done"] == 0  # it waits its turn
        release.set()
        chat.join(30)
        warm = _follow(http, started["id"])
        assert answered[0].status_code == 200 and warm["status"] == "done", warm
    gateway.close()


def test_a_failed_warm_says_so_without_telling_an_internal_errors_text(home):
    gateway = _gateway(home)

    def refuse(*args, **kwargs):
        raise RuntimeError("a secret of the host: /etc/shadow")

    gateway.memory._forced = refuse
    with TestClient(create_app(gateway, deposits=WRITERS), base_url="http://127.0.0.1") as http:
        warm = _follow(http, http.post(WARMS, json={"skills": ["pdf"]}).json()["id"])
        assert warm["status"] == "failed" and warm["error"] == "internal error (see the gateway's log)"
        assert "report" not in warm and "secret" not in str(http.get(WARMS).json())
    gateway.close()
