"""A server that dies under a request (fakes): a JSON answer is answered again afresh on the
restarted server, whatever it had made; a stream that sent tokens ends with an error event."""

from __future__ import annotations

import json
import logging

from fastapi.testclient import TestClient

from skillgraft.errors import ServerError
from skillgraft.gateway.app import create_app
from skillgraft.gateway.service import Gateway
from skillgraft.memory import SkillMemory
from skillgraft.testing import FakeEngine, FakePool

REPLY = "The lighthouse keeper fed his cat."


class DyingEngine(FakeEngine):
    """Its server dies after ``after`` tokens of the next ``deaths`` answers, and comes back."""

    def __init__(self, deaths: int, after: int = 3) -> None:
        super().__init__(reply=REPLY)
        self.deaths, self.after, self.restarts = deaths, after, 0

    def generate(self, options):
        for index, step in enumerate(super().generate(options)):
            if index == self.after and self.deaths:
                self.deaths -= 1
                self._dead = True
                raise ServerError("streaming from the server failed: peer closed the connection")
            yield step

    def exited_within(self, timeout: float) -> bool:
        return getattr(self, "_dead", False)

    def ensure_running(self) -> bool:
        if not getattr(self, "_dead", False):
            return False
        self._dead = False
        self.restarts += 1
        return True


def _client(tmp_path, fake_embedder, engine):
    with SkillMemory(tmp_path / "home", engine=engine, embedder=fake_embedder):
        pass
    gateway = Gateway(tmp_path / "home", FakePool(engine), embedder=fake_embedder)
    return gateway, TestClient(create_app(gateway), base_url="http://127.0.0.1")


def _chat(http, **extra):
    body = {"model": "fake-chatml", "max_tokens": 64, "messages": [{"role": "user", "content": "tell me a story"}],
            **extra}
    return http.post("/v1/chat/completions", json=body)


def test_a_json_answer_is_answered_again_afresh_when_its_server_dies_mid_answer(tmp_path, fake_embedder):
    engine = DyingEngine(deaths=1)
    gateway, client = _client(tmp_path, fake_embedder, engine)
    with client as http:
        reply = _chat(http)
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["message"]["content"] == REPLY  # the whole answer, once
        assert engine.restarts == 1 and gateway.pool.leases == 2
        assert gateway.memory.store.ledger_counts().get("generate") == 1  # one answer recorded
    gateway.close()


def test_a_second_death_is_a_503_and_a_stream_that_sent_tokens_ends_with_an_error_event(tmp_path, fake_embedder):
    engine = DyingEngine(deaths=2)
    gateway, client = _client(tmp_path, fake_embedder, engine)
    with client as http:
        twice = _chat(http)
        assert twice.status_code == 503 and twice.json()["error"]["code"] == "unavailable"
        engine.deaths = 1
        streamed = _chat(http, stream=True)
        events = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
        assert streamed.status_code == 200 and "error" in events[-1] and engine.deaths == 0
        assert all("error" not in event for event in events[:-1]) and len(events) > 2
    gateway.close()


def test_a_503_for_a_server_error_says_why_in_the_gateways_log(tmp_path, fake_embedder, caplog):
    engine = DyingEngine(deaths=2)
    gateway, client = _client(tmp_path, fake_embedder, engine)
    with caplog.at_level(logging.WARNING, logger="skillgraft.gateway"), client as http:
        reply = _chat(http)
    gateway.close()
    assert reply.status_code == 503 and reply.json()["error"]["code"] == "unavailable"
    said = [record.getMessage() for record in caplog.records
            if record.name == "skillgraft.gateway" and record.levelno == logging.WARNING and "503" in record.getMessage()]
    assert len(said) == 1 and "ServerError" in said[0] and "peer closed the connection" in said[0], said
