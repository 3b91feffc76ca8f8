"""Deadlines and disconnects at the gateway, on the fakes: an answer that never ends is
stopped at its deadline (504) and a client that goes away gives its slot back at once,
streamed or not, ``n`` > 1 included. The ASGI app is driven directly, so a disconnect is a
message the test sends (as uvicorn does when the socket closes)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from skillgraft.core.answer import AnswerNote
from skillgraft.gateway.app import create_app
from skillgraft.gateway.service import Gateway
from skillgraft.testing import FakePool

from .conftest import GIT_QUERY

NOTE = AnswerNote("abstain", "abstain", None, None, 0.0, 0.5, "test")


class Endless:
    """A pipeline whose answers never end: a token every ``every_s``; records when it was closed."""

    def __init__(self, every_s: float = 0.02) -> None:
        self.every_s, self.closed_at, self.started = every_s, None, 0

    def events(self, plan, slot, options, prompt=None):
        self.started += 1
        try:
            yield NOTE
            while True:
                time.sleep(self.every_s)
                yield "x"
        finally:
            self.closed_at = time.monotonic()


@pytest.fixture
def endless(fake_stocked, fake_engine, fake_embedder):
    pool = FakePool(fake_engine)
    gateway = Gateway(fake_stocked.store.home, pool, embedder=fake_embedder)
    pipeline = Endless()
    gateway.pipeline.events = pipeline.events
    gateway.pipeline.prompt = lambda plan, options: None
    yield gateway, pool, pipeline
    gateway.close()


def _call(app, body: dict, *, leave_after_s=None, timeout_s=10.0):
    """POST ``body`` to the app; with ``leave_after_s`` the client disconnects then. Returns
    (status, body bytes)."""
    raw = json.dumps(body).encode()
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions", "query_string": b"",
             "root_path": "", "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"),
                                          (b"content-length", str(len(raw)).encode())],
             "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8080)}
    sent, status = [], []

    async def run():
        messages = [{"type": "http.request", "body": raw, "more_body": False}]

        async def receive():
            if messages:
                return messages.pop(0)
            if leave_after_s is None:
                await asyncio.Event().wait()
            await asyncio.sleep(leave_after_s)
            return {"type": "http.disconnect"}

        async def send(message):
            if message["type"] == "http.response.start":
                status.append(message["status"])
            elif message["type"] == "http.response.body":
                sent.append(message.get("body", b""))

        await asyncio.wait_for(app(scope, receive, send), timeout_s)

    asyncio.run(run())
    return (status[0] if status else None), b"".join(sent)


def _chat(**extra) -> dict:
    return {"model": "fake-chatml", "messages": [{"role": "user", "content": GIT_QUERY}], **extra}


def _free(pool) -> bool:
    return not pool._lock.locked()


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("n", [1, 8])
def test_a_client_that_leaves_gives_its_slot_back_at_once(endless, stream, n):
    gateway, pool, pipeline = endless
    left = time.monotonic() + 0.3
    _call(create_app(gateway), _chat(stream=stream, n=n), leave_after_s=0.3)
    # a few tokens' wait (every 20 ms, one per choice), never the answer's end (it has none); room for loaded cores
    assert pipeline.closed_at is not None and pipeline.closed_at - left < 1.0
    assert _free(pool) and pipeline.started == 1


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_that_runs_past_its_deadline_is_stopped(endless, stream):
    gateway, pool, pipeline = endless
    gateway.generation_timeout_s = 0.3
    started = time.monotonic()
    status, body = _call(create_app(gateway), _chat(stream=stream))
    assert pipeline.closed_at is not None and pipeline.closed_at - started < 1.0 and _free(pool)
    if stream:  # the error comes as the stream's last event
        assert status == 200 and b'"code": "timeout"' in body and b"generation ran past its deadline" in body
    else:
        assert status == 504 and json.loads(body)["error"]["code"] == "timeout"


def test_the_whole_request_has_a_deadline_too(endless):
    gateway, pool, pipeline = endless
    gateway.request_timeout_s = 0.3
    status, body = _call(create_app(gateway), _chat())
    assert status == 504 and "the request ran past its deadline of 0.3 s" in json.loads(body)["error"]["message"]
    assert _free(pool)


def test_an_ordinary_request_with_several_choices_is_answered_whole(fake_stocked, fake_engine, fake_embedder):
    gateway = Gateway(fake_stocked.store.home, FakePool(fake_engine), embedder=fake_embedder)
    try:
        status, body = _call(create_app(gateway), _chat(n=2))
        assert status == 200 and len(json.loads(body)["choices"]) == 2
    finally:
        gateway.close()


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_leaves_while_waiting_for_a_slot_never_takes_one(endless, stream):
    """Before, a request left in the slot queue still took its turn: a backlog of abandoned
    requests held the slots after their clients had gone."""
    gateway, pool, pipeline = endless
    app = create_app(gateway)

    async def both():
        holder = asyncio.ensure_future(asyncio.to_thread(_call, app, _chat(), leave_after_s=1.0))
        await asyncio.sleep(0.3)  # the holder has the one slot now
        await asyncio.to_thread(_call, app, _chat(stream=stream), leave_after_s=0.2)
        await holder

    asyncio.run(both())
    assert pipeline.started == 1 and _free(pool)
