"""Namespaces on one real gateway: a client probing another's system prompt learns nothing
from what is reused (``cache_n``, ``reused_from``) nor from how soon its first token comes; in
its own namespace the same probe would tell. Two namespaces keep their own memories over one
base. Both tests share one gateway (its keys name four namespaces, two for each test)."""

from __future__ import annotations

import time

import pytest

from tests.required import need
from tests.required import require_llama_server

openai = need("openai", "skillgraft[dev]")

pytestmark = [pytest.mark.server, pytest.mark.model]

KEY_A, KEY_B = "key-of-team-a-0001", "key-of-team-b-0002"
KEY_C, KEY_D = "key-of-team-c-0005", "key-of-team-d-0006"  # the probing test's own namespaces
RULES = " ".join(f"Rule {i}: answer in one short line and never mention the rules." for i in range(12))


def vault(code: str) -> str:
    return f"You are the vault desk of a bank. {RULES} The vault code is {code}. Never tell it to anyone."


def ask(client, name: str, system: str, question: str) -> tuple[dict, float]:
    started = time.perf_counter()
    reply = client.chat.completions.create(model=name, max_tokens=1, temperature=0, extra_body={"skillgraft": {"route": False}},
                                           messages=[{"role": "system", "content": system}, {"role": "user", "content": question}])
    return reply.model_extra["skillgraft"], time.perf_counter() - started


DEPOSIT_KEY, ADMIN_KEY = "the-deposit-key-0003", "the-admin-key-0004"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    """One gateway on a new SQLite store: four namespaces' keys, deposits allowed, an admin key."""
    from skillgraft.bench.serve import GatewayProcess

    require_llama_server()
    folder = tmp_path_factory.mktemp("scopes")
    keys = folder / "keys"
    keys.write_text(f"team-a {KEY_A}\nteam-b {KEY_B}\nteam-c {KEY_C}\nteam-d {KEY_D}\n")
    keys.chmod(0o600)
    process = GatewayProcess(folder / "store", servers=1, model="smollm2-135m", log_path=folder / "gateway.log",
                             extra_args=["--create", "--keys", str(keys), "--allow-deposits", "--deposit-key", DEPOSIT_KEY,
                                         "--api-key", ADMIN_KEY])
    process.home = folder / "store"
    try:
        yield process
    finally:
        assert process.stop() == 0


def test_another_namespace_cannot_probe_a_system_prompt(gateway):
    a = openai.OpenAI(base_url=gateway.url + "/v1", api_key=KEY_C, max_retries=0, timeout=300)
    b = openai.OpenAI(base_url=gateway.url + "/v1", api_key=KEY_D, max_retries=0, timeout=300)
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
    # B's wrong guess reuses B's own earlier probe at most, up to where its code differs; A's own goes past the code
    assert own["cache_n"] > 100 and own["cache_n"] > wrong["cache_n"]
    assert wrong["reused_from"] == "derived"  # B's own probe, kept when A took the slot (B's scope alone)


GIT = ("Skill manual: squashing commits with git. Run git rebase -i HEAD~N, keep the first line as pick and "
       "change the others to squash, then push with git push --force-with-lease.")
BREAD = ("Skill manual: baking sourdough bread. Feed the starter, mix flour and water, rest, add salt, fold every "
         "half hour, shape, proof overnight in the fridge and bake covered at 250 C.")
KETTLE = "Skill manual: descaling a kettle. Fill it with water and citric acid, boil, let it stand an hour, rinse twice."


def test_two_namespaces_have_their_own_memories_over_one_base(gateway):
    """Through a real gateway on SQLite: each key's namespace deposits, lists, routes, reads and
    deletes its own skills, and sees them on /ui; both read the base the deposit key published;
    neither reaches the other's; the admin key's /ui shows the base, or a namespace it picks."""
    import httpx

    home = gateway.home
    http = httpx.Client(base_url=gateway.url, timeout=300)

    def call(method: str, path: str, key: str, **body) -> httpx.Response:
        return http.request(method, path, headers={"Authorization": f"Bearer {key}"}, **body)

    def deposit(key: str, name: str, text: str, example: str) -> dict:
        reply = call("POST", "/v1/skillgraft/skills", key,
                     json={"kind": "manual", "name": name, "text": text, "examples": [example]})
        assert reply.status_code == 201, reply.text
        return reply.json()

    def names(key: str) -> set[str]:
        return {skill["name"] for skill in call("GET", "/v1/skillgraft/skills", key).json()["data"]}

    def routed(key: str, query: str) -> dict:
        body = {"model": "smollm2-135m", "max_tokens": 4, "temperature": 0,
                "messages": [{"role": "system", "content": "You are a terse assistant."},
                             {"role": "user", "content": query}]}
        reply = call("POST", "/v1/chat/completions", key, json=body)
        assert reply.status_code == 200, reply.text
        return reply.json()["skillgraft"]

    deposit(DEPOSIT_KEY, "git-squash", GIT, "how do I squash my last commits?")
    bread = deposit(KEY_A, "sourdough", BREAD, "how do I bake sourdough bread?")
    deposit(KEY_B, "kettle", KETTLE, "how do I descale my kettle?")
    assert names(KEY_A) == {"git-squash", "sourdough"} and names(KEY_B) == {"git-squash", "kettle"}
    assert routed(KEY_A, "How do I bake sourdough bread at home?")["block_name"] == "sourdough"
    assert routed(KEY_B, "How do I bake sourdough bread at home?")["block_name"] != "sourdough"
    assert routed(KEY_B, "How do I squash my last three commits?")["block_name"] == "git-squash"
    assert call("GET", "/v1/skillgraft/skills/sourdough", KEY_B).status_code == 404

    def on_ui(key: str, path: str = "/ui") -> set[str]:
        page = call("GET", path, key)
        assert page.status_code == 200, page.text
        return {name for name in ("git-squash", "sourdough", "kettle") if f">{name}<" in page.text}

    assert on_ui(KEY_A) == {"git-squash", "sourdough"} and on_ui(KEY_B) == {"git-squash", "kettle"}
    assert on_ui(KEY_B, "/ui?namespace=team-a") == {"git-squash", "kettle"}  # a namespace's key picks none
    assert call("GET", "/ui/skills/sourdough", KEY_B).status_code == 404
    assert on_ui(ADMIN_KEY) == {"git-squash"} and on_ui(ADMIN_KEY, "/ui?namespace=team-a") == {"git-squash", "sourdough"}
    assert call("DELETE", "/v1/skillgraft/skills/sourdough", KEY_B).status_code == 404
    assert call("DELETE", "/v1/skillgraft/skills/git-squash", KEY_A).status_code == 403
    own = home / "namespaces" / "team-a"
    assert bread["id"] in {b.id for b in _blocks(own)}  # in the namespace's own store (a deposit is text)
    assert call("DELETE", "/v1/skillgraft/skills/sourdough", KEY_A).status_code == 200
    assert names(KEY_A) == {"git-squash"} and bread["id"] not in {b.id for b in _blocks(own)}
    assert "sourdough" not in {b.name for b in _blocks(home)} and "kettle" not in {b.name for b in _blocks(home)}


def _blocks(home):
    from skillgraft.store.block_store import BlockStore

    store = BlockStore(home, read_only=True)
    try:
        return store.blocks()
    finally:
        store.close()
