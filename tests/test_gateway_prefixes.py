"""The gateway keeps an agent's prefix as a derived state off the answer path: not while a
request waits, but once its slot has idled a moment (and on a stop), on both embedded models."""

from __future__ import annotations

import time

import pytest

from skillgraft.kv.prefixes import MIN_TAIL
from tests.conftest import GIT_MANUAL
from tests.required import need
from tests.required import require_llama_server

openai = need("openai", "skillgraft[dev]")

pytestmark = [pytest.mark.server, pytest.mark.model]

AGENT = ("You are a coding agent for a large repository. Follow the team's rules: keep changes small, explain "
         "each command before you run it, never force-push a shared branch, and ask before rewriting history. "
         "Answer in at most three sentences, naming the exact git commands to use. Before any command that "
         "changes history, say which branch it touches, whether the branch is shared with others, and how to "
         "undo it with the reflog if something goes wrong.")
QUESTIONS = ("How do I squash my last three commits?", "Can I combine two commits into one before pushing?",
             "How do I squash the commits of a feature branch?")


@pytest.mark.parametrize("model", ["smollm2-135m", "gemma3-270m"])
def test_an_idle_gateway_keeps_the_agents_prefix_and_a_restart_restores_it(tmp_path, model):
    from skillgraft.bench.serve import GatewayProcess

    require_llama_server()
    home = tmp_path / "store"
    states = lambda: list((home / "derived").rglob("*.state"))  # noqa: E731
    gateway = GatewayProcess(home, servers=1, model=model, log_path=tmp_path / "gateway.log",
                             extra_args=["--create", "--allow-deposits"])
    try:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=300)
        client.post("/skills", body={"kind": "manual", "name": "git-squash", "text": GIT_MANUAL,
                                     "examples": ["how do I squash my last commits?"]}, cast_to=object)
        name = client.models.list().data[0].id
        notes = []
        for question in QUESTIONS:  # back to back: the slot keeps the prefix, nothing is saved meanwhile
            reply = client.chat.completions.create(model=name, max_tokens=1, temperature=0, messages=[
                {"role": "system", "content": AGENT}, {"role": "user", "content": question}])
            notes.append(reply.model_extra["skillgraft"])
        assert [n["reused_from"] for n in notes[1:]] == ["slot", "slot"] and notes[2]["cache_n"] > 40
        deadline = time.monotonic() + 15
        while not states() and time.monotonic() < deadline:  # idle: the pending prefix reaches the disk
            time.sleep(0.1)
        assert len(states()) == 1
        again = [client.chat.completions.create(model=name, max_tokens=8, temperature=0, messages=[
            {"role": "system", "content": AGENT}, {"role": "user", "content": QUESTIONS[2]}]) for _ in range(2)]
        for reply in again:  # the same prompt sent again: all of it reused but the last few tokens, not prefilled
            note = reply.model_extra["skillgraft"]
            assert note["reused_from"] == "slot" and note["cache_n"] == reply.usage.prompt_tokens - MIN_TAIL
        assert again[0].choices[0].message.content == again[1].choices[0].message.content
    finally:
        assert gateway.stop() == 0
    restarted = GatewayProcess(home, servers=1, model=model, log_path=tmp_path / "restarted.log")
    try:
        client = openai.OpenAI(base_url=restarted.url + "/v1", api_key="unused", max_retries=0, timeout=300)
        reply = client.chat.completions.create(model=name, max_tokens=1, temperature=0, messages=[
            {"role": "system", "content": AGENT}, {"role": "user", "content": "What does git rebase -i do?"}])
        note = reply.model_extra["skillgraft"]
        assert note["reused_from"] == "derived" and note["cache_n"] >= notes[2]["cache_n"] - 16
    finally:
        assert restarted.stop() == 0


@pytest.mark.parametrize("model", ["smollm2-135m", "gemma3-270m"])
def test_a_chat_opening_with_a_captured_manual_reuses_its_block_by_key_through_the_gateway(tmp_path, model):
    """Captured blocks are found by key on the gateway's llama-server slots too: a plain chat (no
    routing) whose system message is the manual's text reuses the block's cells."""
    from skillgraft.bench.serve import GatewayProcess

    require_llama_server()
    manual = (GIT_MANUAL + " To squash the last three commits run git rebase -i HEAD~3 and mark two of them as squash."
              " Edit the combined message when the editor opens. To undo a squash, find the old head with git reflog.")
    gateway = GatewayProcess(tmp_path / "store", servers=1, model=model, log_path=tmp_path / "gateway.log",
                             extra_args=["--create", "--allow-deposits"])
    try:
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=300)
        client.post("/skills", body={"kind": "manual", "name": "git-squash", "text": manual, "capture": True,
                                     "examples": ["how do I squash my last commits?"]}, cast_to=object)
        name = client.models.list().data[0].id
        client.chat.completions.create(model=name, max_tokens=1, temperature=0, messages=[  # the slot turns to other cells
            {"role": "user", "content": "Say hello."}], extra_body={"skillgraft": {"route": False}})
        reply = client.chat.completions.create(model=name, max_tokens=4, temperature=0, messages=[
            {"role": "system", "content": manual}, {"role": "user", "content": QUESTIONS[0]}],
            extra_body={"skillgraft": {"route": False}})
        note = reply.model_extra["skillgraft"]
        assert note["decision"] == "abstain" and note["reused_from"] == "derived" and note["cache_n"] >= 64
    finally:
        assert gateway.stop() == 0
