"""A manual deposited on the gateway is stored as text, no slot held; a capture the client asks
for is made in the background (fakes: the deposit's reply, the status route, the kept state, the
deadline, the gateway's close)."""

from __future__ import annotations

import threading
import time

from fastapi.testclient import TestClient

from skillgraft.deposit_policy import DepositPolicy
from skillgraft.gateway.app import create_app
from skillgraft.gateway.service import Gateway
from skillgraft.memory import SkillMemory
from skillgraft.testing import FakeEngine, FakePool

MANUAL = "Baking sourdough: feed the starter the night before, mix, fold four times, proof overnight. " * 4
QUESTION = "how do I bake sourdough bread?"


def _gateway(tmp_path, fake_embedder, engine=None):
    engine = engine or FakeEngine()
    with SkillMemory(tmp_path / "home", engine=engine, embedder=fake_embedder):
        pass
    gateway = Gateway(tmp_path / "home", FakePool(engine), embedder=fake_embedder)
    return gateway, engine


def _deposit(http, **extra):
    body = {"kind": "manual", "name": "sourdough", "text": MANUAL, "examples": [QUESTION], **extra}
    return http.post("/v1/skillgraft/skills", json=body)


def _settled(http, ref: str) -> dict:
    for _ in range(200):
        status = http.get(f"/v1/skillgraft/skills/{ref}/capture").json()
        if status["state"] != "running":
            return status
        time.sleep(0.05)
    raise AssertionError(f"the capture of {ref} is still running: {status}")


def test_a_deposit_is_text_by_default_and_runs_no_model(tmp_path, fake_embedder):
    gateway, engine = _gateway(tmp_path, fake_embedder)
    pool = gateway.pool
    with TestClient(create_app(gateway, deposits=DepositPolicy(allowed=True)), base_url="http://127.0.0.1") as http:
        reply = _deposit(http)
        assert reply.status_code == 201, reply.text
        assert "capture" not in reply.json() and pool.leases == 0 and engine.calls["capture"] == 0
        assert gateway.memory.blocks.get("sourdough").text_only
        missing = http.get("/v1/skillgraft/skills/sourdough/capture")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
        assert _deposit(http).status_code == 201  # the same manual again is the stored one
    gateway.close()


def test_an_asked_capture_runs_in_the_background_and_its_state_serves_the_first_chat(tmp_path, fake_embedder):
    gateway, engine = _gateway(tmp_path, fake_embedder)
    with TestClient(create_app(gateway, deposits=DepositPolicy(allowed=True)), base_url="http://127.0.0.1") as http:
        reply = _deposit(http, capture=True)
        assert reply.status_code == 201, reply.text
        capture = reply.json()["capture"]
        block = gateway.memory.blocks.get("sourdough")
        assert block.text_only and capture["block_id"] == block.id and capture["parts"] == 1
        assert capture["state"] in ("running", "done")
        status = _settled(http, "sourdough")
        assert (status["state"], status["parts_done"], status["object"]) == ("done", 1, "skill.capture")
        chat = {"model": "fake-chatml", "max_tokens": 4, "messages": [{"role": "user", "content": QUESTION}]}
        note = http.post("/v1/chat/completions", json=chat).json()["skillgraft"]
        assert note["decision"] == "graft" and note["cache_n"] > 0  # the kept state, not a prefill
    gateway.close()


def test_a_capture_stops_at_its_deadline_and_when_asked_to_close(tmp_path, fake_embedder):
    from skillgraft.gateway.captures import BackgroundCaptures

    gateway, _ = _gateway(tmp_path, fake_embedder)
    block = gateway.add_manual("sourdough", MANUAL)
    held = threading.RLock()  # a chat holds the memory: the capture waits for it before its part
    for deadline_s, stop in ((0.0, None), (600.0, "close")):
        captures = BackgroundCaptures(gateway.memory, held, deadline_s)
        with held:
            assert captures.start(block, held).state == "running"
            closing = threading.Thread(target=captures.close) if stop else None
            if closing is not None:
                closing.start()
            time.sleep(0.2)
        if closing is not None:
            closing.join(10)
            assert not closing.is_alive()
        for _ in range(100):
            status = captures.status(block.id)
            if status.state != "running":
                break
            time.sleep(0.05)
        assert (status.state, status.parts_done) == ("stopped", 0) and "before 1 of 1 parts" in status.reason
    gateway.close()


def test_with_derived_states_off_the_manual_is_stored_and_its_capture_says_why_not(tmp_path, fake_embedder):
    engine = FakeEngine()
    with SkillMemory(tmp_path / "home", engine=engine, embedder=fake_embedder):
        pass
    gateway = Gateway(tmp_path / "home", FakePool(engine), embedder=fake_embedder, derived_bytes=0)
    with TestClient(create_app(gateway, deposits=DepositPolicy(allowed=True)), base_url="http://127.0.0.1") as http:
        reply = _deposit(http, capture=True)
        assert reply.status_code == 201, reply.text
        capture = reply.json()["capture"]
        assert capture["state"] == "failed" and "derived states are off" in capture["reason"]
        block = gateway.memory.blocks.get("sourdough")
        assert block.text_only
    gateway.close()
    assert gateway.captures.start(block, threading.Lock()).state == "stopped"  # a closed gateway starts none
