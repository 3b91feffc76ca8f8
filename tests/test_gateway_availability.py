"""A real gateway over one llama-server with SmolLM2 stays available: a long skill uploaded (or
a manual deposited) while a chat goes on returns once its text is stored, and the chat is
answered; a capture the client asks for is made in the background and serves the next chat; a
request in flight when the server is killed is answered normally on the restarted server."""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx
import pytest

from tests.required import need
from tests.required import require_llama_server
from tests.unit.skill_uploads import skill_md

need("fastapi", "skillgraft[serve]")

pytestmark = [pytest.mark.server, pytest.mark.model]

PROMPT_BOUND_S = 30.0  # generous for a loaded machine; capturing the skill would take minutes here
SECTION = ("Step {i}: check the field named field-{i} in the form, write its value in the ledger, sign the ledger "
           "line with the date, and file the form in drawer {i}. If the field is empty, return the form to its "
           "sender with a note that names the field.\n\n")


def _long_skill_md(kib: int) -> bytes:
    body, i = "# Filing forms\n\n", 0
    while len(body) < kib * 1024:
        body += f"## Form {i}\n\n" + SECTION.format(i=i)
        i += 1
    return skill_md("form-filing", "File paper forms and keep the ledger.", body)


class Chat(threading.Thread):
    """A chat running while the test does something else; ``status`` its HTTP status."""

    def __init__(self, url: str, question: str, max_tokens: int = 48) -> None:
        super().__init__(daemon=True)
        self.url, self.question, self.max_tokens = url, question, max_tokens
        self.status: int = 0
        self.body: dict = {}

    def run(self) -> None:
        body = {"model": "smollm2-135m", "max_tokens": self.max_tokens, "temperature": 0,
                "messages": [{"role": "user", "content": self.question}]}
        reply = httpx.post(self.url + "/v1/chat/completions", json=body, timeout=600, trust_env=False)
        self.status, self.body = reply.status_code, reply.json()


def _leased(url: str) -> int:
    return httpx.get(url + "/healthz", trust_env=False).json()["slots_leased"]


def _in_flight(url: str, chat: Chat) -> None:
    chat.start()
    for _ in range(600):
        if _leased(url) or not chat.is_alive():
            return
        time.sleep(0.05)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    from skillgraft.bench.serve import GatewayProcess

    require_llama_server()
    folder = tmp_path_factory.mktemp("uploads")
    process = GatewayProcess(folder / "store", servers=1, model="smollm2-135m", log_path=folder / "gateway.log",
                             extra_args=["--create", "--allow-deposits", "--deposits-per-minute", "60"])
    process.log_path = folder / "gateway.log"
    try:
        yield process
    finally:
        assert process.stop() == 0


def test_a_long_skill_uploaded_during_a_chat_returns_promptly_and_the_chat_is_answered(gateway):
    text = _long_skill_md(48)
    chat = Chat(gateway.url, "Write a short story about a lighthouse keeper and his cat.", max_tokens=96)
    _in_flight(gateway.url, chat)
    started = time.perf_counter()
    reply = httpx.post(gateway.url + "/v1/skills", files=[("files[]", ("form-filing/SKILL.md", text))],
                       timeout=600, trust_env=False)
    upload_s = time.perf_counter() - started
    chat.join(600)
    print(f"\n{len(text) / 1024:.0f} KiB SKILL.md uploaded in {upload_s:.2f} s during a chat")
    assert reply.status_code == 200, reply.text
    assert upload_s < PROMPT_BOUND_S
    assert chat.status == 200, chat.body
    skill = httpx.get(f"{gateway.url}/v1/skills/{reply.json()['id']}", trust_env=False).json()
    assert skill["name"] == "form-filing" and skill["latest_version"] == "1"


def test_a_capture_asked_for_runs_in_the_background_while_chats_are_served(gateway):
    manual = "Skill manual: repotting a fern. " + " ".join(
        f"Step {i}: loosen the roots of pot {i}, add fresh peat, water until it drains." for i in range(40))
    chat = Chat(gateway.url, "Write a short poem about autumn leaves.", max_tokens=64)
    _in_flight(gateway.url, chat)
    started = time.perf_counter()
    reply = httpx.post(gateway.url + "/v1/skillgraft/skills", trust_env=False, timeout=600, json={
        "kind": "manual", "name": "fern-repotting", "text": manual, "capture": True,
        "examples": ["how do I repot my fern?"]})
    deposit_s = time.perf_counter() - started
    assert reply.status_code == 201, reply.text
    assert deposit_s < PROMPT_BOUND_S and reply.json()["capture"]["parts"] == 1
    second = Chat(gateway.url, "Name three rivers in Europe.", max_tokens=16)  # while the capture may run
    second.start()
    chat.join(600)
    second.join(600)
    assert (chat.status, second.status) == (200, 200), (chat.body, second.body)
    for _ in range(1200):
        status = httpx.get(f"{gateway.url}/v1/skillgraft/skills/fern-repotting/capture", trust_env=False).json()
        if status["state"] != "running":
            break
        time.sleep(0.1)
    print(f"\ndeposit {deposit_s:.2f} s; capture {status}")
    assert (status["state"], status["parts_done"]) == ("done", 1), status
    time.sleep(1.5)  # the slot's pending state is kept once it idles
    answer = httpx.post(gateway.url + "/v1/chat/completions", trust_env=False, timeout=600, json={
        "model": "smollm2-135m", "max_tokens": 4, "messages": [{"role": "user", "content": "how do I repot my fern?"}]})
    note = answer.json()["skillgraft"]
    assert note["block_name"] == "fern-repotting" and note["cache_n"] > 500, note


def test_a_request_in_flight_when_the_only_server_is_killed_is_answered_normally(gateway):
    before = httpx.get(gateway.url + "/healthz", trust_env=False).json()["servers"][0]
    chat = Chat(gateway.url, "Write a long story about a lighthouse keeper, his cat and a storm.", max_tokens=200)
    _in_flight(gateway.url, chat)
    time.sleep(1.0)  # its prompt is prefilled by now and tokens are coming
    os.kill(before["pid"], signal.SIGKILL)
    chat.join(600)
    after = httpx.get(gateway.url + "/healthz", trust_env=False).json()["servers"][0]
    assert chat.status == 200, chat.body
    assert chat.body["choices"][0]["message"]["content"].strip()
    assert after["restarts"] == before["restarts"] + 1 and after["pid"] != before["pid"] and after["alive"]
    assert "answered again afresh" in gateway.log_path.read_text()
