"""`skillgraft serve` end to end: a real gateway process over real llama-servers, driven by the
`openai` client and plain HTTP. `make test` builds the server first; a missing build fails
here under SKILLGRAFT_REQUIRE_SERVER instead of skipping.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import httpx
import pytest

from tests.conftest import GIT_MANUAL
from tests.required import need, require_llama_server

openai = need("openai", "skillgraft[dev]")

pytestmark = pytest.mark.server

SYSTEM = "You are a helpful assistant."
IN_DOMAIN = "How do I squash my last three commits with git?"
OFF_TOPIC = "Who painted the Mona Lisa?"


@pytest.fixture(scope="module")
def store(tmp_path_factory, stocked_store, smollm2, embedder):
    """A store with two manuals and one verified solution (captured in-process): a copy of the
    session's stocked store."""
    from skillgraft.memory import SkillMemory

    home = tmp_path_factory.mktemp("gateway") / "store"
    shutil.copytree(stocked_store, home)
    with SkillMemory(home, engine=smollm2, embedder=embedder) as memory:
        blocks = {block.name: block for block in memory.blocks.list()}
    assert len(blocks) == 3 and {"git-squash", "sourdough"} <= set(blocks)
    return home, blocks


@pytest.fixture(scope="module")
def gateway(store, tmp_path_factory):
    from skillgraft.bench.serve import GatewayProcess

    require_llama_server()
    home, _ = store
    process = GatewayProcess(home, servers=1, model=None, log_path=tmp_path_factory.mktemp("gwlog") / "gateway.log",
                             extra_args=["--allow-deposits", "--deposits-per-minute", "60"])  # room for both skills tests
    try:
        yield process
    finally:
        assert process.stop() == 0
        for pid in process.server_pids:  # stopped by the gateway, by their own PIDs
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)


@pytest.fixture(scope="module")
def client(gateway):
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def model_id(client):
    return client.models.list().data[0].id


def _server_tasks(gateway) -> list:
    """How many completions each llama-server was asked for."""
    health = httpx.get(gateway.url + "/healthz", trust_env=False).json()
    return [server["completions"] for server in health["servers"]]


def test_in_domain_with_a_system_prompt_places_the_block_after_it(client, model_id, store, smollm2):
    from skillgraft.core.chat_layout import skill_prompt

    home, blocks = store
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": IN_DOMAIN}]
    response = client.chat.completions.create(model=model_id, messages=messages, max_tokens=24, temperature=0)
    note = response.skillgraft
    assert note["decision"] == "graft", note
    block = blocks["git-squash"]
    assert note["block_id"] == block.id and note["block_name"] == "git-squash"
    assert note["score"] >= note["threshold"]
    assert [(s["block_name"], s["turn"]) for s in note["skills"]] == [("git-squash", 0)]
    # The app's system turn leads, the block's text follows it (the block leads only a chat with no
    # prompt of the app's): the prompt is exactly that chat's tokens.
    tokens, _ = skill_prompt(smollm2, block.source, [(m["role"], m["content"]) for m in messages])
    assert response.usage.prompt_tokens == len(tokens)
    assert response.choices[0].message.content.strip()
    assert response.usage.completion_tokens > 0


def test_a_user_only_chat_reuses_every_block_token(client, model_id, store):
    _, blocks = store
    response = client.chat.completions.create(
        model=model_id, messages=[{"role": "user", "content": IN_DOMAIN}], max_tokens=16, temperature=0
    )
    assert response.skillgraft["decision"] == "graft"
    assert response.skillgraft["cache_n"] >= blocks["git-squash"].n_tokens  # the whole block, and what the slot held


def test_the_grafted_answer_equals_a_fresh_prefill_on_a_server(client, model_id, store, smollm2):
    from skillgraft.core.sampling import SamplingOptions
    from skillgraft.server.engine import LlamaServerEngine

    _, blocks = store
    messages = [("user", IN_DOMAIN)]
    response = client.chat.completions.create(
        model=model_id, messages=[{"role": r, "content": c} for r, c in messages], max_tokens=20, temperature=0,
        extra_body={},
    )
    assert response.skillgraft["decision"] == "graft"
    block = blocks["git-squash"]
    prompt = smollm2.chat_prompt([("system", block.source), *messages])
    with LlamaServerEngine("smollm2-135m") as fresh:
        cold = fresh.complete(fresh.tokenize(prompt), SamplingOptions(20), cache_prompt=False)
    assert response.choices[0].message.content == cold.text


def test_a_recurring_verified_question_is_answered_without_the_model(client, model_id, gateway):
    before = _server_tasks(gateway)
    response = client.chat.completions.create(
        model=model_id, messages=[{"role": "user", "content": "what is 17*23"}], max_tokens=16
    )
    assert response.skillgraft["decision"] == "exact"
    assert response.choices[0].message.content == "391"
    assert response.usage.completion_tokens == 0 and response.skillgraft["cache_n"] == 0
    assert _server_tasks(gateway) == before


def test_an_off_topic_question_abstains_and_generates_plainly(client, model_id):
    response = client.chat.completions.create(
        model=model_id, messages=[{"role": "user", "content": OFF_TOPIC}], max_tokens=12, temperature=0
    )
    assert response.skillgraft["decision"] == "abstain"
    assert response.skillgraft["block_id"] is None and response.skillgraft["reused_from"] in ("", "slot")
    assert response.choices[0].message.content.strip()
    assert response.choices[0].finish_reason in {"stop", "length"}


@pytest.mark.parametrize("question", [IN_DOMAIN, OFF_TOPIC, "What is 17 * 23?"])
def test_streaming_gives_the_same_answer_and_decision(client, model_id, question):
    messages = [{"role": "user", "content": question}]
    whole = client.chat.completions.create(model=model_id, messages=messages, max_tokens=20, temperature=0)
    chunks = list(client.chat.completions.create(model=model_id, messages=messages, max_tokens=20, temperature=0, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert {c.skillgraft["decision"] for c in chunks} == {whole.skillgraft["decision"]}
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason


def test_stop_strings_and_max_tokens_are_honoured(client, model_id):
    messages = [{"role": "user", "content": OFF_TOPIC}]
    short = client.chat.completions.create(model=model_id, messages=messages, max_tokens=3, temperature=0)
    assert short.choices[0].finish_reason == "length" and short.usage.completion_tokens == 3
    full = client.chat.completions.create(model=model_id, messages=messages, max_tokens=24, temperature=0)
    words = full.choices[0].message.content.split()
    assert len(words) >= 3
    stopped = client.chat.completions.create(model=model_id, messages=messages, max_tokens=24, temperature=0, stop=[words[2]])
    assert words[2] not in stopped.choices[0].message.content
    assert stopped.choices[0].finish_reason == "stop"


@pytest.mark.parametrize(
    "body, status, code",
    [
        ({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}, 404, "model_not_found"),
        ({"model": None, "messages": []}, 400, None),
        ({"model": "M", "messages": [{"role": "assistant", "content": "hi"}]}, 400, None),
        ({"model": "M", "messages": [{"role": "tool", "content": "hi"}]}, 400, None),
        ({"model": "M", "messages": [{"role": "user", "content": "hi\u0000"}]}, 400, None),
        ({"model": "M", "messages": [{"role": "user", "content": "hi"}], "n": 9}, 400, None),
        ({"model": "M", "messages": [{"role": "user", "content": "hi"}], "max_tokens": -1}, 400, None),
        ({"model": "M", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}, 400, None),
        ({"model": "M", "messages": [{"role": "user", "content": "word " * 9000}]}, 400, "context_length_exceeded"),
    ],
)
def test_bad_requests_get_openai_style_4xx_errors(gateway, model_id, body, status, code):
    if body.get("model") == "M":
        body = {**body, "model": model_id}
    response = httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=120, trust_env=False)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["message"] and error["type"] == "invalid_request_error"
    if code:
        assert error["code"] == code


def test_malformed_and_oversized_bodies_are_refused(gateway):
    url = gateway.url + "/v1/chat/completions"
    bad = httpx.post(url, content=b"{not json", headers={"content-type": "application/json"}, trust_env=False)
    assert bad.status_code == 400 and bad.json()["error"]["message"]
    huge = httpx.post(url, content=b"x" * (5 << 20), headers={"content-type": "application/json"}, trust_env=False)
    assert huge.status_code == 413

    def chunks():  # no Content-Length: the limit holds while the body is read
        for _ in range(5):
            yield b"x" * (1 << 20)

    chunked = httpx.post(url, content=chunks(), headers={"content-type": "application/json"}, trust_env=False)
    assert chunked.status_code == 413 and chunked.json()["error"]["code"] == "body_too_large"
    assert httpx.get(gateway.url + "/v1/nowhere", trust_env=False).json()["error"]["code"] == "not_found"
    rebound = httpx.get(gateway.url + "/v1/models", headers={"host": "attacker.example"}, trust_env=False)
    assert rebound.status_code == 400  # no API key: only loopback Host headers


@pytest.mark.parametrize("field", [
    {"response_format": {"type": "json_schema"}}, {"logprobs": True},
    {"functions": [{"name": "f"}]}, {"tool_choice": "required"},
])
def test_fields_the_gateway_cannot_honour_are_refused(gateway, model_id, field):
    body = {"model": model_id, "messages": [{"role": "user", "content": "hi"}], **field}
    response = httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=120, trust_env=False)
    assert response.status_code == 400 and response.json()["error"]["param"] == next(iter(field))


def test_null_fields_mean_the_defaults(gateway, model_id):
    body = {"model": model_id, "messages": [{"role": "user", "content": "What is 17 * 23?"}],
            "temperature": None, "stream": None, "n": None, "top_p": 1, "max_tokens": None}
    response = httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=120, trust_env=False)
    assert response.status_code == 200 and response.json()["choices"][0]["message"]["content"] == "391"
    assert httpx.get(f"{gateway.url}/v1/models/{model_id}", trust_env=False).json()["id"] == model_id


def test_a_stream_fails_before_its_first_byte_with_a_status(client, model_id):
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model=model_id, messages=[{"role": "user", "content": "word " * 9000}], stream=True
        )
    assert raised.value.code == "context_length_exceeded"


def test_a_chat_longer_than_the_old_default_window_is_answered(client, model_id):
    """The window is the model's own, as llama-server's default: SmolLM2's 8,192 tokens, so a
    chat of some 4,150 tokens (refused under the old 4,096-token default) is answered."""
    long_chat = [{"role": "user", "content": "word " * 4150 + "\nSay yes."}]
    answer = client.chat.completions.create(model=model_id, messages=long_chat, max_tokens=1, temperature=0)
    assert answer.usage.prompt_tokens > 4096 and answer.choices[0].finish_reason in ("length", "stop")


def test_usage_is_streamed_when_asked(client, model_id):
    chunks = list(client.chat.completions.create(
        model=model_id, messages=[{"role": "user", "content": OFF_TOPIC}], max_tokens=5, stream=True,
        stream_options={"include_usage": True},
    ))
    assert chunks[-1].usage.completion_tokens == 5 and chunks[-1].usage.prompt_tokens > 0


def test_a_client_that_leaves_mid_stream_gives_its_slot_back(gateway, client, model_id):
    body = {"model": model_id, "messages": [{"role": "user", "content": OFF_TOPIC}], "max_tokens": 300, "stream": True}
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body, timeout=120, trust_env=False) as response:
        for index, _ in enumerate(response.iter_lines()):
            if index >= 3:
                break
    deadline = time.monotonic() + 30
    while httpx.get(gateway.url + "/healthz", trust_env=False).json()["slots_leased"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert httpx.get(gateway.url + "/healthz", trust_env=False).json()["slots_leased"] == 0
    answer = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": OFF_TOPIC}], max_tokens=3)
    assert answer.choices[0].finish_reason == "length"


def test_chats_back_to_back_and_at_once_get_no_5xx_from_a_healthy_server(gateway, model_id):
    """200 short chats, whole, streamed and with n=2, first one after another and then from four
    clients queued on the one slot: a kept-alive connection that llama-server drops under a
    request is sent again, so none is answered 5xx (nor ends in an error event) while the
    server stays up."""
    from concurrent.futures import ThreadPoolExecutor

    kinds = [{}, {"stream": True}, {"n": 2, "temperature": 0.7}, {"n": 2, "temperature": 0.7, "stream": True}]

    def chat(http: httpx.Client, index: int) -> tuple[int, str]:
        """The chat's status (599: a stream that ended in an error event) and the start of its body."""
        body = {"model": model_id, "messages": [{"role": "user", "content": f"Say {index}."}], "max_tokens": 2,
                "temperature": 0, "seed": index, **kinds[index % len(kinds)]}
        with http.stream("POST", "/v1/chat/completions", json=body) as response:
            text = response.read().decode()
        error_event = any(line.startswith('data: {"error"') for line in text.splitlines())
        return (599 if error_event else response.status_code), text[:300]

    restarts = httpx.get(gateway.url + "/healthz", trust_env=False).json()["restarts"]
    with httpx.Client(base_url=gateway.url, timeout=120, trust_env=False) as http:
        answers = [chat(http, index) for index in range(100)]
        with ThreadPoolExecutor(4) as clients:
            answers += list(clients.map(lambda index: chat(http, index), range(100, 200)))
    failed = [(index, status, text) for index, (status, text) in enumerate(answers) if status >= 500]
    assert not failed, f"{len(failed)} of 200 chats failed, the first: {failed[:3]}"
    assert [status for status, _ in answers] == [200] * 200
    health = httpx.get(gateway.url + "/healthz", trust_env=False).json()
    assert health["status"] == "ok" and health["restarts"] == restarts and health["slots_leased"] == 0


def test_skills_api_adds_verifies_lists_and_deletes(gateway, client, model_id):
    skills = gateway.url + "/v1/skillgraft/skills"
    manual = {
        "kind": "manual", "name": "tire-change",
        "text": "Skill manual: changing a flat tire. Loosen the lug nuts, jack the car up, swap in the spare wheel.",
        "examples": ["how do I change a flat tire?"],
    }
    added = httpx.post(skills, json=manual, timeout=300, trust_env=False)
    assert added.status_code == 201, added.text
    block_id = added.json()["id"]
    assert httpx.post(skills, json=manual, timeout=300, trust_env=False).status_code == 201  # same text, same name: the same block
    clash = httpx.post(skills, json={**manual, "text": manual["text"] + " Then check the pressure."}, timeout=300, trust_env=False)
    assert clash.status_code == 409
    response = client.chat.completions.create(
        model=model_id, messages=[{"role": "user", "content": "How do I change a flat tire on my car?"}], max_tokens=8
    )
    assert response.skillgraft["block_id"] == block_id

    wrong = {"kind": "solution", "question": "What is 6 * 7?", "answer": "41", "method": "print(6 * 7, 'canary-5150')"}
    refused = httpx.post(skills, json=wrong, timeout=300, trust_env=False)
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "verification_failed"
    assert "canary-5150" not in refused.text and "not verified" in refused.json()["error"]["message"]
    forged = {**wrong, "answer": "41", "verifier": "exact", "expected": "41"}
    assert httpx.post(skills, json=forged, timeout=300, trust_env=False).status_code == 400
    names = {row["name"] for row in httpx.get(skills, trust_env=False).json()["data"]}
    assert "tire-change" in names and not any("6 * 7" in name for name in names)

    assert httpx.delete(f"{skills}/{block_id}", trust_env=False).json()["deleted"] is True
    assert httpx.delete(f"{skills}/{block_id}", trust_env=False).status_code == 404


def test_feedback_corrects_the_routing_of_chats(gateway, client, model_id, store):
    _, blocks = store
    feedback = gateway.url + "/v1/skills/feedback"
    query = "my starter smells like nail polish remover"
    given = httpx.post(feedback, json={"query": query, "expected": "sourdough"}, timeout=300, trust_env=False)
    assert given.status_code == 200, given.text
    assert given.json()["kind"] in ("feedback", "none") and given.json()["block_id"] == blocks["sourdough"].id
    response = client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": query}], max_tokens=4)
    assert response.skillgraft["block_id"] == blocks["sourdough"].id
    listed = httpx.get(feedback, trust_env=False).json()["data"]
    assert all(row["created_by"].startswith("gateway:127.0.0.1") for row in listed)
    refusals = [
        ({"query": query, "expected": "no-such-skill"}, 404),
        ({"query": "What is 17 * 23?", "expected": None}, 400),  # a verified question: never corrected
        ({"query": "", "expected": None}, 400),
        ({"query": query}, 400),
        ({"query": query, "expected": None, "vector": [1.0]}, 400),
    ]
    for body, status in refusals:
        answer = httpx.post(feedback, json=body, timeout=300, trust_env=False)
        assert answer.status_code == status and "error" in answer.json(), (body, answer.text)
    for row in listed:
        assert httpx.delete(f"{feedback}/{row['id']}", trust_env=False).json()["deleted"] is True
    assert httpx.delete(f"{feedback}/999999", trust_env=False).status_code == 400
    assert httpx.get(feedback, trust_env=False).json()["data"] == []


def test_health_and_metrics(gateway, client, model_id):
    health = httpx.get(gateway.url + "/healthz", trust_env=False).json()
    assert health["status"] == "ok" and health["slots_total"] == 1 and health["servers"][0]["pid"] == gateway.server_pids[0]
    client.chat.completions.create(model=model_id, messages=[{"role": "user", "content": IN_DOMAIN}], max_tokens=4)
    text = httpx.get(gateway.url + "/metrics", trust_env=False).text
    assert 'skillgraft_requests_total{decision="graft"}' in text
    assert "skillgraft_restore_seconds_bucket" in text and "skillgraft_server_restarts" in text


def test_an_api_key_is_required_off_loopback_and_checked(store, tmp_path):
    from skillgraft.bench.serve import GatewayProcess

    home, _ = store
    refused = subprocess.run(
        [sys.executable, "-m", "skillgraft", "serve", "--home", str(home), "--host", "0.0.0.0", "--port", "0"],
        capture_output=True, text=True, timeout=120,
    )
    assert refused.returncode == 1 and "--api-key" in refused.stderr
    require_llama_server()
    keyed = GatewayProcess(home, servers=1, model=None, log_path=tmp_path / "gw.log", extra_args=["--api-key", "s3cret"])
    try:
        body = {"model": "x", "messages": [{"role": "user", "content": "hi"}]}
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            denied = httpx.post(keyed.url + "/v1/chat/completions", json=body, headers=headers, trust_env=False)
            assert denied.status_code == 401 and denied.json()["error"]["code"] == "invalid_api_key"
        assert httpx.get(keyed.url + "/v1/skills", trust_env=False).status_code == 401
        assert httpx.get(keyed.url + "/healthz", trust_env=False).status_code == 200
        allowed = httpx.get(keyed.url + "/v1/models", headers={"Authorization": "Bearer s3cret"}, trust_env=False)
        assert allowed.status_code == 200
    finally:
        assert keyed.stop() == 0


@pytest.mark.sandbox
def test_a_killed_server_loses_no_request_and_comes_back():
    """Bounded load with one llama-server SIGKILLed a third of the way through."""
    from skillgraft.bench.serve import bench_serve

    require_llama_server()
    report = bench_serve(clients=3, requests=4, servers=2, kill=True)
    summary = report["summary"]
    assert summary["killed_server_pid"] is not None
    assert summary["lost"] == 0 and summary["wrong"] == 0, summary
    assert summary["answered"] + summary["retryable_errors"] == summary["requests"] == 12
    assert summary["server_restarts"] >= 1 and summary["healthy_after"], summary
    assert summary["check_ok"] and summary["gateway_exit_code"] == 0


def test_two_gateways_share_one_store(gateway, client, model_id, store, tmp_path):
    """A skill added through one gateway is routed to by another serving the same store."""
    from skillgraft.bench.serve import GatewayProcess

    home, _ = store
    second = GatewayProcess(home, servers=1, model=None, log_path=tmp_path / "second.log", extra_args=["--allow-deposits"])
    try:
        manual = {
            "kind": "manual", "name": "bike-chain",
            "text": "Skill manual: fixing a bicycle chain. Shift to the smallest cog, open the quick link with "
                    "pliers, replace the broken link, close it and oil the chain.",
            "examples": ["how do I fix my bicycle chain?"],
        }
        assert httpx.post(second.url + "/v1/skills", json=manual, timeout=300, trust_env=False).status_code == 201
        response = client.chat.completions.create(
            model=model_id, messages=[{"role": "user", "content": "My bicycle chain broke, how do I fix it?"}], max_tokens=8
        )
        assert response.skillgraft["block_name"] == "bike-chain"
        other = openai.OpenAI(base_url=second.url + "/v1", api_key="unused", max_retries=0)
        exact = other.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "What is 17 * 23?"}])
        assert exact.choices[0].message.content == "391"
    finally:
        assert second.stop() == 0
    check = subprocess.run([sys.executable, "-m", "skillgraft", "check", "--home", str(home), "--json"],
                           capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr


def test_langchain_chat_openai_talks_to_the_gateway(gateway, model_id):
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(base_url=gateway.url + "/v1", api_key="unused", model=model_id, temperature=0, max_tokens=16,
                     max_retries=0)
    messages = [("system", SYSTEM), ("user", IN_DOMAIN)]
    reply = llm.invoke(messages)
    assert reply.content.strip()
    streamed = "".join(chunk.content for chunk in llm.stream(messages))
    assert streamed == reply.content
    # The decision, as docs/gateway.md shows a ChatOpenAI user reading it.
    headed = ChatOpenAI(base_url=gateway.url + "/v1", api_key="unused", model=model_id, temperature=0, max_tokens=16,
                        max_retries=0, include_response_headers=True)
    headers = headed.invoke(messages).response_metadata["headers"]
    assert headers["x-skillgraft-decision"] == "graft" and headers["x-skillgraft-block-name"] == "git-squash"


def test_a_damaged_block_is_never_grafted(tmp_path, smollm2, embedder):
    """A block file flipped on disk: the gateway generates plainly and says why; the store
    quarantines the file."""
    from skillgraft.bench.serve import GatewayProcess
    from skillgraft.memory import SkillMemory

    require_llama_server()
    home = tmp_path / "store"
    with SkillMemory(home, engine=smollm2, embedder=embedder) as memory:
        block = memory.add_manual("git-squash", GIT_MANUAL, examples=["how do I squash my last commits?"])
        path = memory.store.path_of(block)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    gateway = GatewayProcess(home, servers=1, model=None, log_path=tmp_path / "gw.log")
    try:
        body = {"model": "smollm2-135m", "messages": [{"role": "user", "content": IN_DOMAIN}], "max_tokens": 4}
        answer = httpx.post(gateway.url + "/v1/chat/completions", json=body, timeout=300, trust_env=False).json()
    finally:
        assert gateway.stop() == 0
    assert answer["skillgraft"]["decision"] == "fallback" and answer["skillgraft"]["reused_from"] != "block"
    assert answer["skillgraft"]["block_id"] == block.id and answer["skillgraft"]["routed"] == "graft"
    assert "cannot be read" in answer["skillgraft"]["reason"] and block.id in answer["skillgraft"]["reason"]
    assert not path.exists()  # moved to quarantine


# -- the skills API for hosts with their own model ---------------------------------------------


def test_a_host_reads_a_skills_text_and_recalls_over_http(gateway, store):
    from urllib.parse import quote

    _, blocks = store
    url = gateway.url + "/v1/skills"
    manual = httpx.get(f"{url}/git-squash", trust_env=False).json()
    assert (manual["object"], manual["id"], manual["text"]) == ("skill", blocks["git-squash"].id, GIT_MANUAL)
    assert "how do I squash my last commits?" in manual["examples"]
    solution = httpx.get(f"{url}/{quote('What is 17 * 23?')}", trust_env=False).json()
    assert (solution["answer"], solution["method"], solution["verifier"]) == ("391", "print(17 * 23)", "python")
    missing = httpx.get(f"{url}/no-such-skill", trust_env=False)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "skill_not_found"

    graft = httpx.post(f"{url}/recall", json={"query": IN_DOMAIN}, trust_env=False)
    found = graft.json()
    assert graft.status_code == 200 and found["object"] == "skill.recall"
    assert found["decision"] == "graft" and found["skill"]["text"] == GIT_MANUAL and found["answer"] is None
    assert graft.headers["x-skillgraft-decision"] == "graft"
    assert graft.headers["x-skillgraft-block"] == blocks["git-squash"].id
    assert graft.headers["x-skillgraft-block-name"] == "git-squash"
    exact = httpx.post(f"{url}/recall", json={"query": "what is 17*23"}, trust_env=False)
    assert exact.json()["answer"] == "391" and exact.headers["x-skillgraft-decision"] == "exact"
    abstain = httpx.post(f"{url}/recall", json={"query": OFF_TOPIC}, trust_env=False)
    assert abstain.json()["skill"] is None and abstain.headers["x-skillgraft-decision"] == "abstain"
    assert "x-skillgraft-block" not in abstain.headers


@pytest.mark.parametrize("body", [{"query": ""}, {"query": "   "}, {"query": "a\x00b"}, {"question": "hi"}, {"query": 7}, [1]])
def test_a_bad_recall_is_a_400(gateway, body):
    response = httpx.post(gateway.url + "/v1/skills/recall", json=body, trust_env=False)
    assert response.status_code == 400 and response.json()["error"]["message"]


def test_a_recall_body_that_is_not_json_is_a_400(gateway):
    response = httpx.post(gateway.url + "/v1/skills/recall", content=b"\xff{", trust_env=False,
                          headers={"content-type": "application/json"})
    assert response.status_code == 400


def test_the_openai_client_manages_agent_skills_and_hostile_uploads_are_4xx(gateway, client):
    """`client.skills` against the real server: create, list, retrieve, versions, content, delete;
    each hostile upload a 4xx with an OpenAI error object, nothing of it stored. Last in the
    module, and it deletes what it made: the other tests' routing never sees the skill."""
    import io
    import zipfile

    from .unit.skill_uploads import HOSTILE, PDF, files, skill_md

    writer = openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    created = writer.skills.create(files=files(PDF))
    assert (created.name, created.default_version, created.object) == ("pdf", "1", "skill")
    assert created.id in [skill.id for skill in client.skills.list()]
    assert client.skills.retrieve(created.id) == created
    second = writer.skills.versions.create(created.id, files=files({**PDF, "pdf/SKILL.md": skill_md(
        "pdf", "Read, fill, merge and split PDF files.")}))
    assert second.version == "2" and client.skills.retrieve(created.id).default_version == "2"
    assert [v.version for v in client.skills.versions.list(created.id)] == ["2", "1"]
    old = zipfile.ZipFile(io.BytesIO(client.skills.versions.content.retrieve("1", skill_id=created.id).read()))
    assert {name: old.read(name) for name in old.namelist()} == PDF
    assert writer.skills.update(created.id, default_version="1").default_version == "1"
    assert writer.skills.versions.delete("2", skill_id=created.id).deleted

    for case in ("a .. path", "an absolute path", "a zip bomb", "too many files", "a too-large file",
                 "a link in a zip", "a name of control characters"):
        parts, status, code = HOSTILE[case]
        with pytest.raises(openai.APIStatusError) as refused:
            writer.skills.create(files=parts)
        assert (refused.value.status_code, refused.value.code) == (status, code), (case, refused.value.message)
    assert [skill.name for skill in client.skills.list()] == ["pdf"]
    assert writer.skills.delete(created.id).deleted
    assert list(client.skills.list()) == []
