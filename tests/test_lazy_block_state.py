"""A routed block's payload is read only where the cells lack it, on the real engines: SmolLM2
in-process, and the gateway over a real llama-server; a payload found damaged then is
quarantined and the chat answered plainly."""

from __future__ import annotations

import pytest

from tests.conftest import GIT_MANUAL, SOURDOUGH_MANUAL
from tests.required import need

QUESTION = "How do I squash my last three commits with git?"
CHAT = [("user", QUESTION)]  # no system turn of the app's: the captured block leads the chat, restored


def _corrupt(store, block) -> None:
    path = store.path_of(block)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    store.evict(block.sha256)


def test_smollm2_grafts_a_held_block_without_reading_it_and_falls_back_on_a_damaged_one(memory, monkeypatch):
    from skillgraft.core.answer import AnswerOptions

    git = memory.add_manual("git-squash", GIT_MANUAL, examples=["how do I squash my last commits?"])
    memory.add_manual("sourdough", SOURDOUGH_MANUAL, examples=["how do I bake sourdough bread?"])
    options = AnswerOptions(max_tokens=8, temperature=0.0)
    first = memory.answer(CHAT, options)
    assert (first.note.decision, first.note.block_id) == ("graft", git.id)
    memory.store.evict(git.sha256)
    reads, read = [], memory.store.storage.read
    monkeypatch.setattr(memory.store.storage, "read", lambda block, check: reads.append(block.id) or read(block, check))
    again = memory.answer(CHAT, options)
    assert (again.note.decision, again.text, reads) == ("graft", first.text, [])  # the cells held it: nothing read

    memory.answer([("user", "How do I bake sourdough bread?")], options)  # the cells hold another block now
    _corrupt(memory.store, git)
    damaged = memory.answer(CHAT, options)
    assert damaged.note.decision == "fallback" and damaged.note.block_id == git.id
    assert "cannot be read" in damaged.note.reason and damaged.text.strip()
    assert memory.store.get(git.id).status == "quarantined"


@pytest.mark.server
def test_the_gateway_over_llama_server_answers_plainly_when_the_payload_is_damaged(tmp_path, smollm2, embedder):
    need("fastapi", "skillgraft[serve]")
    from fastapi.testclient import TestClient

    from skillgraft.gateway.app import create_app
    from skillgraft.gateway.pool import ServerPool
    from skillgraft.gateway.service import Gateway
    from skillgraft.memory import SkillMemory
    from tests.required import require_llama_server

    require_llama_server()
    home = tmp_path / "store"
    with SkillMemory(home, engine=smollm2, embedder=embedder) as memory:
        git = memory.add_manual("git-squash", GIT_MANUAL, examples=["how do I squash my last commits?"])
        _corrupt(memory.store, git)
    pool = ServerPool(1, 1, model="smollm2-135m")
    gateway = Gateway(home, pool, embedder=embedder)
    try:
        with TestClient(create_app(gateway), base_url="http://127.0.0.1") as http:
            model = http.get("/v1/models").json()["data"][0]["id"]
            body = {"model": model, "messages": [{"role": r, "content": c} for r, c in CHAT], "max_tokens": 8,
                    "temperature": 0}
            for stream in (False, True):
                reply = http.post("/v1/chat/completions", json={**body, "stream": stream})
                assert reply.status_code == 200, reply.text
                if not stream:
                    note = reply.json()["skillgraft"]
                    assert note["decision"] == "fallback" and note["block_id"] == git.id, note
                    assert reply.json()["choices"][0]["message"]["content"].strip()
    finally:
        gateway.close()
        pool.close()
    with SkillMemory(home, engine=smollm2, embedder=embedder) as memory:
        assert memory.store.get(git.id).status == "quarantined"
