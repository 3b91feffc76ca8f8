"""Text that is no UTF-8 (an unpaired surrogate, which JSON's ``\\ud800`` escape can carry) is
a 400 on every field of a chat, never a 500 from the tokenizer: the typed fields refuse it as
they parse, and a JSON schema (``response_format``, a tool's ``parameters``), which is free
JSON, refuses it before it is written into the prompt."""

from __future__ import annotations

import pytest

from tests.required import need

need("fastapi", "skillgraft[serve]")

from fastapi.testclient import TestClient  # noqa: E402

from skillgraft.core.json_grammar import schema_grammar  # noqa: E402
from skillgraft.errors import FormatError  # noqa: E402
from skillgraft.gateway.app import create_app  # noqa: E402
from skillgraft.gateway.service import Gateway  # noqa: E402
from skillgraft.memory import SkillMemory  # noqa: E402
from skillgraft.testing import FakePool  # noqa: E402

SCHEMA_ENUM = '"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "enum": ["\\ud800"]}}}'
SCHEMA_KEY = '"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"\\udc00": {}}}}}'
TOOL_KEY = '"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"\\ud83d": {"type": "string"}}}}}]'


@pytest.fixture
def http(tmp_path, fake_engine, fake_embedder):
    SkillMemory(tmp_path / "home", engine=fake_engine, embedder=fake_embedder).close()
    gateway = Gateway(tmp_path / "home", FakePool(fake_engine), embedder=fake_embedder)
    with TestClient(create_app(gateway), base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
        yield client, gateway.model_name
    gateway.close()


@pytest.mark.parametrize("field, extra", [("response_format", SCHEMA_ENUM), ("response_format", SCHEMA_KEY),
                                          ("tools", TOOL_KEY)])
def test_an_unpaired_surrogate_in_a_schema_is_a_400_naming_its_field(http, field, extra):
    client, model = http
    raw = '{"model": "%s", "messages": [{"role": "user", "content": "hi"}], %s}' % (model, extra)
    reply = client.post("/v1/chat/completions", content=raw.encode(), headers={"content-type": "application/json"})
    assert reply.status_code == 400, reply.text
    assert (reply.json()["error"]["param"], reply.json()["error"]["code"]) == (field, "unsupported_format")


def test_an_unpaired_surrogate_in_a_typed_field_is_a_400(http):
    client, model = http
    raw = '{"model": "%s", "messages": [{"role": "user", "content": "hi"}], "skillgraft": {"cache_salt": "\\ud800"}}' % model
    reply = client.post("/v1/chat/completions", content=raw.encode(), headers={"content-type": "application/json"})
    assert reply.status_code == 400, reply.text


def test_in_process_a_schema_of_an_unpaired_surrogate_is_a_format_error():
    with pytest.raises(FormatError):
        schema_grammar({"type": "string", "const": "\ud800"})
