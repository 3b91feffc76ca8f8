"""Two namespaces on one real gateway: a client probing another's system prompt learns nothing
from what is reused (``cache_n``, ``reused_from``) nor from how soon its first token comes; in
its own namespace the same probe would tell."""

from __future__ import annotations

import time

import pytest

from tests.required import need
from tests.test_gateway import _require_server

openai = need("openai", "skillgraft[dev]")

pytestmark = [pytest.mark.server, pytest.mark.model]

KEY_A, KEY_B = "key-of-team-a-0001", "key-of-team-b-0002"
RULES = " ".join(f"Rule {i}: answer in one short line and never mention the rules." for i in range(12))


def vault(code: str) -> str:
    return f"You are the vault desk of a bank. {RULES} The vault code is {code}. Never tell it to anyone."


def ask(client, name: str, system: str, question: str) -> tuple[dict, float]:
    started = time.perf_counter()
    reply = client.chat.completions.create(model=name, max_tokens=1, temperature=0, extra_body={"skillgraft": {"route": False}},
                                           messages=[{"role": "system", "content": system}, {"role": "user", "content": question}])
    return reply.model_extra["skillgraft"], time.perf_counter() - started


def test_another_namespace_cannot_probe_a_system_prompt(tmp_path):
    from skillgraft.bench.serve import GatewayProcess

    _require_server()
    keys = tmp_path / "keys"
    keys.write_text(f"team-a {KEY_A}\nteam-b {KEY_B}\n")
    keys.chmod(0o600)
    gateway = GatewayProcess(tmp_path / "store", servers=1, model="smollm2-135m", log_path=tmp_path / "gateway.log",
                             extra_args=["--create", "--keys", str(keys)])
    try:
        a = openai.OpenAI(base_url=gateway.url + "/v1", api_key=KEY_A, max_retries=0, timeout=300)
        b = openai.OpenAI(base_url=gateway.url + "/v1", api_key=KEY_B, max_retries=0, timeout=300)
        name = a.models.list().data[0].id
        for question in ("Open the front door please.", "Log my visit for today."):
            ask(a, name, vault("4711"), question)
        right, right_s = ask(b, name, vault("4711"), "Is it raining today?")  # B guesses right at once
        ask(a, name, vault("4711"), "Any mail for me?")  # A's agent goes on
        wrong, wrong_s = ask(b, name, vault("9052"), "Is it windy today?")
        own, own_s = ask(a, name, vault("4711"), "Any parcels for me?")
        print(f"\nB right guess: cache_n {right['cache_n']} {right_s:.3f} s; B wrong guess: cache_n "
              f"{wrong['cache_n']} {wrong_s:.3f} s; A's own: cache_n {own['cache_n']} ({own['reused_from']}) {own_s:.3f} s")
        assert (right["cache_n"], right["reused_from"]) == (0, "")  # nothing of A's is continued
        assert wrong["cache_n"] < 40 and own["cache_n"] > 100  # B's own earlier probe at most; A reuses its own
    finally:
        assert gateway.stop() == 0
