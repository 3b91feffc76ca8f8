"""The gateway's decisions on the fakes: an HTTP client over the app, no llama-server.

The same chats through ``SkillMemory.answer`` and through ``POST /v1/chat/completions`` give
the same decision, block and text: both doors run the one answer pipeline.
"""

from __future__ import annotations

import json

from fastapi.testclient import TestClient
import pytest

from skillgraft.cli.main import cli
from skillgraft.core.answer import AnswerOptions, decision_of
from skillgraft.core.chat_layout import chat_tokens, continuation, skill_prompt
from skillgraft.core.planning import NOT_ROUTED
from skillgraft.errors import InputError
from skillgraft.gateway.app import create_app
from skillgraft.memory import SkillMemory
from skillgraft.gateway.service import Gateway
from skillgraft.testing import FakePool

from .conftest import GIT_QUERY, OUT_OF_DOMAIN, QUESTION

GIT_REPLY = "Run git rebase -i and squash."
PLAIN_REPLY = "I can help with that."


def replies(prompt: str):
    return GIT_REPLY if "squashing commits" in prompt else PLAIN_REPLY


@pytest.fixture
def client(fake_stocked, fake_engine, fake_embedder):
    fake_engine.reply = replies
    gateway = Gateway(fake_stocked.store.home, FakePool(fake_engine), embedder=fake_embedder)
    app = create_app(gateway)
    with TestClient(app, base_url="http://127.0.0.1") as http:
        yield http, gateway
    gateway.close()


def _chat(http, messages, **extra):
    body = {"model": "fake-chatml", "messages": [{"role": r, "content": c} for r, c in messages], **extra}
    return http.post("/v1/chat/completions", json=body)


CHATS = {
    "exact": [("user", QUESTION)],
    "graft": [("user", GIT_QUERY)],
    "graft with a system prompt": [("system", "You are a terse assistant."), ("user", GIT_QUERY)],
    "multi-turn": [("user", "hello"), ("assistant", "hi"), ("user", GIT_QUERY)],
    "abstain": [("user", OUT_OF_DOMAIN)],
}


@pytest.mark.parametrize("name", sorted(CHATS))
def test_the_gateway_and_the_memory_give_the_same_answer(client, fake_stocked, name):
    http, _ = client
    response = _chat(http, CHATS[name], max_tokens=24)
    assert response.status_code == 200, response.text
    body = response.json()
    direct = fake_stocked.answer(CHATS[name], AnswerOptions(max_tokens=24))
    note = body["skillgraft"]
    assert (note["decision"], note["block_id"]) == (direct.note.decision, direct.note.block_id)
    assert body["choices"][0]["message"]["content"] == direct.text
    # What was reused is the context's own history, not the decision: compared apart.
    assert decision_of(note) == decision_of(direct.note)


@pytest.mark.parametrize("name", ["exact", "graft"])
def test_route_false_is_a_plain_answer_the_caller_asked_for_through_every_door(client, fake_stocked, name, monkeypatch):
    http, _ = client
    last = max((row["id"] for row in fake_stocked.store.ledger(1)), default=0)
    with monkeypatch.context() as patched:
        patched.setattr(fake_stocked, "recall", lambda *args, **kwargs: pytest.fail("route=False recalled"))
        direct = fake_stocked.answer(CHATS[name], AnswerOptions(max_tokens=24), route=False)
    note = direct.note
    assert (note.decision, note.routed, note.block_id, note.reason) == ("abstain", "abstain", None, NOT_ROUTED)
    assert direct.text == PLAIN_REPLY and direct.end.completion_tokens > 0 and note.reused_from != "block"
    rows = [row for row in fake_stocked.store.ledger() if row["id"] > last]
    assert [(r["event"], r["decision"]) for r in rows] == [("generate", "abstain")]
    body = _chat(http, CHATS[name], max_tokens=24, skillgraft={"route": False}).json()
    assert decision_of(body["skillgraft"]) == decision_of(note) and body["choices"][0]["message"]["content"] == PLAIN_REPLY
    generated = fake_stocked.generate(CHATS[name][-1][1], max_tokens=24, route=False)
    assert (generated.decision, generated.text, generated.as_dict()["reason"]) == ("abstain", PLAIN_REPLY, NOT_ROUTED)
    routed = _chat(http, CHATS[name], max_tokens=24, skillgraft={"route": True}).json()["skillgraft"]
    assert routed["decision"] == name


def test_route_false_with_a_block_or_a_bad_field_is_refused(client, fake_stocked):
    http, _ = client
    with pytest.raises(InputError, match="route=False"):
        fake_stocked.answer(CHATS["graft"], block="git-squash", route=False)
    with pytest.raises(InputError, match="route=False"):
        fake_stocked.answer(CHATS["graft"], recall=fake_stocked.recall(GIT_QUERY), route=False)
    for field in ({"route": "no"}, {"routes": False}, ["route"]):
        response = _chat(http, CHATS["graft"], skillgraft=field)
        assert response.status_code == 400 and response.json()["error"]["param"].startswith("skillgraft"), response.text


def test_ask_no_route_answers_plainly(runner, fake_stocked, fake_engine, fake_embedder, monkeypatch):
    fake_engine.reply = replies
    monkeypatch.setattr(SkillMemory, "open", classmethod(
        lambda cls, home=None, **options: cls(home, engine=fake_engine, embedder=fake_embedder)))
    home = str(fake_stocked.store.home)
    asked = runner.invoke(cli, ["--home", home, "ask", QUESTION, "--no-route", "--json"])
    assert asked.exit_code == 0, asked.output
    answer = json.loads(asked.stdout)
    assert (answer["decision"], answer["text"], answer["reason"]) == ("abstain", PLAIN_REPLY, NOT_ROUTED)
    routed = json.loads(runner.invoke(cli, ["--home", home, "ask", QUESTION, "--json"]).stdout)
    assert (routed["decision"], routed["text"]) == ("exact", "391")


def test_a_stream_holds_the_graft_until_judged_and_says_so_first(client, fake_stocked):
    http, _ = client
    with http.stream("POST", "/v1/chat/completions", json={
        "model": "fake-chatml", "stream": True, "messages": [{"role": "user", "content": GIT_QUERY}],
    }) as response:
        assert response.status_code == 200
        chunks = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
    assert chunks[0]["skillgraft"]["decision"] == "graft"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text.strip() == GIT_REPLY == fake_stocked.answer([("user", GIT_QUERY)]).text


def test_an_enforced_gate_falls_back_and_reports_the_block_it_tried(fake_stocked, fake_engine, fake_embedder):
    fake_engine.reply = lambda prompt: None if "squashing commits" in prompt else PLAIN_REPLY
    gateway = Gateway(fake_stocked.store.home, FakePool(fake_engine), embedder=fake_embedder, gate="enforce")
    with TestClient(create_app(gateway), base_url="http://127.0.0.1") as http:
        note = _chat(http, [("user", GIT_QUERY)]).json()["skillgraft"]
    gateway.close()
    assert note["decision"] == "fallback" and note["routed"] == "graft"
    assert note["block_name"] == "git-squash" and note["gate"]["fell_back"]
    assert note["reason"].startswith("graft not confident")


def test_every_answer_writes_one_ledger_row(client, fake_stocked):
    http, _ = client
    last = max((row["id"] for row in fake_stocked.store.ledger(1)), default=0)
    _chat(http, [("user", GIT_QUERY)])
    rows = [row for row in fake_stocked.store.ledger() if row["id"] > last]
    assert [(r["event"], r["decision"]) for r in rows] == [("generate", "graft")]


@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("name", ["graft", "graft with a system prompt", "multi-turn", "abstain"])
def test_a_chat_is_tokenized_once_and_leases_the_slot_by_the_tokens_it_prefills(
        fake_stocked, fake_engine, fake_embedder, monkeypatch, name, n):
    fake_engine.reply = replies
    pool = FakePool(fake_engine)
    gateway = Gateway(fake_stocked.store.home, pool, embedder=fake_embedder)
    chat, calls, tokenize = CHATS[name], [], fake_engine.tokenize
    monkeypatch.setattr(fake_engine, "tokenize", lambda text, **kw: calls.append(text) or tokenize(text, **kw))
    if name == "abstain":
        chat_tokens(fake_engine, chat)
    elif chat[0][0] == "system":  # the app's prompt first, the manual placed after it
        skill_prompt(fake_engine, fake_stocked.blocks.get("git-squash").source, chat)
    else:
        continuation(fake_engine, fake_stocked.blocks.get("git-squash"), chat)
    once, calls[:] = len(calls), []
    with TestClient(create_app(gateway), base_url="http://127.0.0.1") as http:
        body = _chat(http, chat, max_tokens=8, n=n).json()
    gateway.close()
    assert body["skillgraft"]["decision"] == ("abstain" if name == "abstain" else "graft")
    assert len(body["choices"]) == n
    assert len(calls) == once > 0  # one rendering of the prompt, however many choices
    leased = pool.prompts[-1]  # the slot was chosen by the tokens the context was prompted with
    assert leased and tuple(fake_engine.context_tokens[:len(leased)]) == leased


@pytest.mark.parametrize("messages", [
    '[{"role": "assistant", "content": "hi"}]',
    '[{"role": "user", "content": "\\ud800"}]',
    '[{"role": "tool", "content": "x"}]',
    '[{"role": "user", "content": "x"}], "max_tokens": 0',
    '[{"role": "user", "content": "x"}], "top_p": 0',
])
def test_a_bad_chat_is_a_400(client, messages):
    http, _ = client
    body = '{"model": "fake-chatml", "messages": ' + messages + "}"
    response = http.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_the_decision_is_in_the_response_headers_streamed_or_not(client, fake_stocked):
    http, _ = client
    block = fake_stocked.blocks.get("git-squash")
    whole = _chat(http, [("user", GIT_QUERY)])
    assert whole.headers["x-skillgraft-decision"] == "graft" and whole.headers["x-skillgraft-block"] == block.id
    assert int(whole.headers["x-skillgraft-cache-n"]) == whole.json()["skillgraft"]["cache_n"] > 0
    with http.stream("POST", "/v1/chat/completions", json={
        "model": "fake-chatml", "stream": True, "messages": [{"role": "user", "content": OUT_OF_DOMAIN}],
    }) as response:
        assert response.headers["x-skillgraft-decision"] == "abstain" and "x-skillgraft-block" not in response.headers


def test_usage_counts_the_reused_prompt_tokens_as_cached_streamed_or_not(client):
    http, _ = client
    whole = _chat(http, [("user", GIT_QUERY)]).json()
    assert whole["usage"]["prompt_tokens_details"]["cached_tokens"] == whole["skillgraft"]["cache_n"] > 0
    with http.stream("POST", "/v1/chat/completions", json={
        "model": "fake-chatml", "stream": True, "stream_options": {"include_usage": True}, "n": 2,
        "messages": [{"role": "user", "content": GIT_QUERY}],
    }) as response:
        chunks = [json.loads(line[len("data: "):]) for line in response.iter_lines()
                  if line.startswith("data: ") and line != "data: [DONE]"]
    notes = [chunk["skillgraft"] for chunk in chunks if chunk["choices"] and chunk["choices"][0]["delta"].get("role")]
    assert chunks[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] == notes[0]["cache_n"] > 0


# -- the skills API and the routing corrections, through the gateway's verbs ---------------------


def test_a_recall_over_http_is_the_skill_texts_recall_with_its_note(client, fake_stocked):
    http, _ = client
    block = fake_stocked.blocks.get("git-squash")
    found = http.post("/v1/skills/recall", json={"query": GIT_QUERY})
    body = found.json()
    assert found.status_code == 200 and body["object"] == "skill.recall"
    assert (body["decision"], body["block_id"], body["skill"]["id"], body["answer"]) == ("graft", block.id, block.id, None)
    assert (body["note"]["decision"], body["note"]["routed"], body["note"]["block_name"]) == ("text", "graft", "git-squash")
    assert found.headers["x-skillgraft-decision"] == "graft" and found.headers["x-skillgraft-block"] == block.id
    exact = http.post("/v1/skills/recall", json={"query": QUESTION}).json()
    assert (exact["decision"], exact["note"]["decision"], exact["answer"]) == ("exact", "exact", "391")
    abstain = http.post("/v1/skills/recall", json={"query": OUT_OF_DOMAIN})
    assert (abstain.json()["skill"], abstain.json()["note"]["block_id"]) == (None, None)
    assert "x-skillgraft-block" not in abstain.headers
    skill = http.get("/v1/skills/git-squash").json()
    assert (skill["object"], skill["id"], skill["kind"]) == ("skill", block.id, "manual")
    assert http.get("/v1/skills/no-such-skill").status_code == 404


def test_corrections_are_given_listed_and_removed_through_the_gateway(fake_stocked, fake_engine, fake_embedder):
    from skillgraft.deposit_policy import DepositPolicy

    gateway = Gateway(fake_stocked.store.home, FakePool(fake_engine), embedder=fake_embedder)
    query = "knead the dough and let it rise"
    with TestClient(create_app(gateway, deposits=DepositPolicy(allowed=True)), base_url="http://127.0.0.1") as http:
        given = http.post("/v1/skills/feedback", json={"query": query, "expected": "sourdough"}).json()
        listed = http.get("/v1/skills/feedback").json()["data"]
        refused = http.post("/v1/skills/feedback", json={"query": QUESTION, "expected": None})
        removed = http.delete(f"/v1/skills/feedback/{listed[0]['id']}").json()
        left = http.get("/v1/skills/feedback").json()["data"]
    gateway.close()
    assert (given["object"], given["kind"], given["block_id"]) == ("skill.feedback", "feedback", fake_stocked.blocks.get("sourdough").id)
    assert [row["id"] for row in listed] == [given["correction_id"]] and listed[0]["created_by"].startswith("gateway:")
    assert refused.status_code == 400 and "verified question" in refused.json()["error"]["message"]
    assert removed["deleted"] is True and removed["id"] == given["correction_id"] and left == []


def test_a_skill_that_leaves_no_room_beside_the_chat_is_left_out_not_a_failed_chat(tmp_path, fake_embedder):
    from skillgraft.testing import FakeEngine

    engine = FakeEngine(n_ctx=400)
    manual = "Squashing commits: run git rebase -i HEAD~3 and mark each later commit as squash; then edit the message."
    with SkillMemory(tmp_path / "home", engine=engine, embedder=fake_embedder) as memory:
        block = memory.add_manual("git-squash", manual, examples=[GIT_QUERY])
        system = "You are a careful assistant. " * 9
        chat = [("system", system), ("user", GIT_QUERY)]
        plain = len(engine.tokenize(engine.chat_prompt(chat)))
        assert block.n_tokens + plain >= engine.n_ctx > plain  # the chat fits alone, not behind the block
        answer = memory.answer(chat, AnswerOptions(max_tokens=4))
        assert answer.note.decision == "fallback" and answer.note.block_id == block.id
        assert "would leave the reply fewer than" in answer.note.reason and answer.end.prompt_tokens == plain
        gateway = Gateway(tmp_path / "home", FakePool(engine), embedder=fake_embedder)
        try:
            with TestClient(create_app(gateway), base_url="http://127.0.0.1") as http:
                response = _chat(http, chat, max_tokens=4)
        finally:
            gateway.close()
        assert response.status_code == 200 and response.json()["skillgraft"]["decision"] == "fallback"


def test_a_manual_deposited_as_text_is_placed_after_the_apps_prompt_and_kept_after_first_use(tmp_path, fake_embedder):
    from skillgraft.core.chat_layout import chat_tokens
    from skillgraft.testing import FakeEngine

    engine = FakeEngine()
    manual = "Baking sourdough: feed the starter the night before, mix, fold four times, proof overnight. " * 4
    with SkillMemory(tmp_path / "home", engine=engine, embedder=fake_embedder):
        pass
    from skillgraft.deposit_policy import DepositPolicy

    gateway = Gateway(tmp_path / "home", FakePool(engine), embedder=fake_embedder)
    with TestClient(create_app(gateway, deposits=DepositPolicy(allowed=True)), base_url="http://127.0.0.1") as http:
        deposit = http.post("/v1/skills", json={"kind": "manual", "name": "sourdough", "text": manual,
                                                 "examples": ["how do I bake sourdough bread?"], "capture": False})
        assert deposit.status_code == 201, deposit.text
        block = gateway.memory.blocks.get("sourdough")
        assert block.text_only and block.n_bytes == 0
        system = "You are the bakery's assistant. Keep every answer short and friendly. " * 2
        notes = []
        for question in ("how do I bake sourdough bread?", "how do I bake sourdough bread at home?"):
            reply = _chat(http, [("system", system), ("user", question)], max_tokens=4)
            assert reply.status_code == 200, reply.text
            notes.append(reply.json()["skillgraft"])
            placed = [("system", system), ("system", manual), ("user", question)]
            assert reply.json()["usage"]["prompt_tokens"] == len(chat_tokens(engine, placed))
        assert [n["decision"] for n in notes] == ["graft", "graft"] and notes[0]["block_id"] == block.id
        assert notes[1]["cache_n"] > len(chat_tokens(engine, [("system", system), ("system", manual)],
                                                     add_generation_prompt=False)) - 8
    gateway.close()
