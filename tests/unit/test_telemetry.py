"""Opt-in OpenTelemetry spans on the fakes, read back with the SDK's in-memory exporter: a routed
answer's recall and chat spans and a deposit's, in the gen_ai.* conventions; no content unless
asked; nothing when off; a clear error when asked for without the package."""

from __future__ import annotations

import json
import sys

import pytest

from tests.required import need

need("opentelemetry.sdk", "skillgraft[dev]")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

from skillgraft.core import telemetry  # noqa: E402
from skillgraft.errors import ConfigError  # noqa: E402
from skillgraft.memory import SkillMemory  # noqa: E402

from .conftest import GIT_MANUAL, GIT_QUERY  # noqa: E402

CONTENT_KEYS = {"gen_ai.memory.query.text", "gen_ai.memory.records", "gen_ai.input.messages", "gen_ai.output.messages"}


@pytest.fixture
def spans():
    """Spans on, into an in-memory exporter; every setting put back afterwards."""
    kept = dict(vars(telemetry._settings))
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.configure(enabled=True, content=False, tracer_provider=provider)
    yield exporter
    vars(telemetry._settings).update(kept)


def by_operation(exporter) -> dict:
    found = {}
    for span in exporter.get_finished_spans():
        found.setdefault(span.attributes["gen_ai.operation.name"], []).append(span)
    return found


def test_a_routed_answer_and_a_deposit_emit_their_spans_without_content(fake_memory, spans):
    block = fake_memory.add_manual("git-squash", GIT_MANUAL, examples=["how do I squash my last commits?"])
    answer = fake_memory.generate(GIT_QUERY, max_tokens=4)
    assert answer.decision == "graft"
    found = by_operation(spans)
    (deposit,) = found["update_memory"]
    assert deposit.name == "update_memory default"
    assert dict(deposit.attributes) == {
        "gen_ai.operation.name": "update_memory", "gen_ai.provider.name": "skillgraft",
        "gen_ai.memory.store.id": "default", "gen_ai.skills": (block.id,), "gen_ai.skill.name": block.id,
        "gen_ai.memory.record.id": block.id}  # content off: a skill is named by its id
    (recall,) = found["search_memory"]
    assert recall.name == "search_memory default"
    assert recall.attributes["skillgraft.decision"] == "graft" and recall.attributes["gen_ai.skill.name"] == block.id
    assert recall.attributes["gen_ai.memory.search.similarity.threshold"] == answer.recall.threshold
    (chat,) = found["chat"]
    assert chat.name == "chat fake-chatml" and chat.attributes["gen_ai.provider.name"] == "llama.cpp"
    assert chat.attributes["gen_ai.request.model"] == "fake-chatml"
    assert chat.attributes["gen_ai.usage.output_tokens"] == answer.decoded_tokens > 0
    assert chat.attributes["gen_ai.usage.input_tokens"] > 0
    assert chat.attributes["gen_ai.skills"] == (block.id,) and chat.attributes["skillgraft.decision"] == "graft"
    assert chat.attributes["skillgraft.prefill_tokens_avoided"] == answer.prefill_tokens_avoided
    assert chat.attributes["gen_ai.usage.cache_read.input_tokens"] == answer.note.cache_n > 0
    assert chat.start_time <= chat.end_time
    for span in spans.get_finished_spans():
        assert not CONTENT_KEYS & set(span.attributes), span.name
        assert GIT_QUERY not in json.dumps(dict(span.attributes), default=str)


def test_content_is_recorded_only_when_asked(fake_memory, spans):
    telemetry.configure(content=True)
    fake_memory.add_manual("git-squash", GIT_MANUAL, examples=["how do I squash my last commits?"])
    answer = fake_memory.generate(GIT_QUERY, max_tokens=4)
    found = by_operation(spans)
    assert json.loads(found["update_memory"][0].attributes["gen_ai.memory.records"])[0]["content"] == GIT_MANUAL
    assert found["update_memory"][0].attributes["gen_ai.skills"] == ("git-squash",)  # content on: by name
    recall = found["search_memory"][0].attributes
    assert recall["gen_ai.memory.query.text"] == GIT_QUERY
    assert json.loads(recall["gen_ai.memory.records"])[0]["content"] == GIT_MANUAL
    chat = found["chat"][0].attributes
    assert json.loads(chat["gen_ai.input.messages"])[-1]["parts"][0]["content"] == GIT_QUERY
    assert json.loads(chat["gen_ai.output.messages"])[0]["parts"][0]["content"] == answer.text


def test_off_means_no_span(fake_memory, spans):
    telemetry.configure(enabled=False)
    fake_memory.add_manual("git-squash", GIT_MANUAL)
    fake_memory.generate(GIT_QUERY, max_tokens=2)
    assert spans.get_finished_spans() == ()
    assert telemetry.span("chat", "x") is telemetry.OFF  # off: one flag check, nothing made


def test_asked_for_without_opentelemetry_is_a_clear_error(tmp_path, monkeypatch, fake_engine, fake_embedder):
    kept = dict(vars(telemetry._settings))
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # as if it were not installed
    try:
        with pytest.raises(ConfigError, match=r"skillgraft\[otel\]"):
            telemetry.configure(enabled=True)
        with pytest.raises(ConfigError, match="opentelemetry-api"):
            SkillMemory(tmp_path / "store", engine=fake_engine, embedder=fake_embedder)
    finally:
        vars(telemetry._settings).update(kept)


def test_the_environment_turns_it_on(monkeypatch):
    monkeypatch.setenv(telemetry.ENV, "1")
    monkeypatch.setenv(telemetry.CONTENT_ENV, "yes")
    settings = telemetry._Settings()
    assert settings.on and settings.content
    monkeypatch.setenv(telemetry.ENV, "0")
    assert not telemetry._Settings().on


def test_a_chat_through_the_gateway_gets_the_same_spans(fake_memory, fake_engine, fake_embedder, spans):
    need("fastapi", "skillgraft[serve]")
    from fastapi.testclient import TestClient

    from skillgraft.gateway.app import create_app
    from skillgraft.gateway.service import Gateway
    from skillgraft.testing import FakePool

    block = fake_memory.add_manual("git-squash", GIT_MANUAL, examples=["how do I squash my last commits?"])
    spans.clear()
    gateway = Gateway(fake_memory.store.home, FakePool(fake_engine), embedder=fake_embedder)
    try:
        with TestClient(create_app(gateway), base_url="http://127.0.0.1") as http:
            reply = http.post("/v1/chat/completions", json={"model": "fake-chatml", "max_tokens": 4,
                                                           "messages": [{"role": "user", "content": GIT_QUERY}]})
    finally:
        gateway.close()
    assert reply.status_code == 200 and reply.json()["skillgraft"]["decision"] == "graft"
    found = by_operation(spans)
    assert [s.attributes["gen_ai.skill.name"] for s in found["search_memory"]] == [block.id]
    (chat,) = found["chat"]
    assert chat.attributes["gen_ai.skills"] == (block.id,)
    assert chat.attributes["gen_ai.usage.output_tokens"] == reply.json()["usage"]["completion_tokens"]
