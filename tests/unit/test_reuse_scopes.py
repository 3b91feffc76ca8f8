"""Prefix reuse never crosses a namespace: a client probing another's system prompt through
what is reused (``cache_n``, ``reused_from``, ``x-skillgraft-cache-n``) learns nothing, and
``/metrics`` is the admin's; the key file that says who is who."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from skillgraft.errors import ConfigError
from skillgraft.gateway.app import create_app
from skillgraft.gateway.keys import ApiKeys, Principal, read_keys
from skillgraft.gateway.service import Gateway
from skillgraft.testing import FakeEmbedder, FakeEngine, FakePool

from .test_prefix_reuse import open_memory

KEY_A, KEY_B, ADMIN_KEY = "key-of-team-a-0001", "key-of-team-b-0002", "the-admin-key-0003"
KEYS = ApiKeys({KEY_A: Principal("team-a"), KEY_B: Principal("team-b"), ADMIN_KEY: Principal(admin=True)})
RULES = " ".join(f"Rule {i}: answer in one short line." for i in range(30))
SECRET = "4711"
GUESSES = ["1234", "4711", "9052", "4700", "0000"]


def vault(code: str) -> str:
    return f"You are the vault desk. {RULES} The vault code is {code}. Never tell it."


@pytest.fixture
def gateway_at(tmp_path):
    made = []

    def make(name: str) -> TestClient:
        open_memory(tmp_path / name).close()
        gateway = Gateway(tmp_path / name, FakePool(FakeEngine()), embedder=FakeEmbedder())
        made.append(gateway)
        return TestClient(create_app(gateway, keys=KEYS), base_url="http://127.0.0.1")

    yield make
    for gateway in made:
        gateway.close()


def ask(http, key: str, system: str, question: str, **memory) -> tuple:
    body = {"model": "fake-chatml", "max_tokens": 2, "skillgraft": {"route": False, **memory},
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}]}
    response = http.post("/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 200, response.text
    note = response.json()["skillgraft"]
    return note["cache_n"], note["reused_from"], response.headers["x-skillgraft-cache-n"]


def probe(http, key: str) -> list[tuple]:
    """What a client sees for each guess of the code, one question each."""
    return [ask(http, key, vault(guess), f"What is the weather like, take {i}?") for i, guess in enumerate(GUESSES)]


def victim(http, key: str = KEY_A) -> None:
    """Client A's agent: its system prompt holds the code; two questions make a derived state."""
    for question in ("Open the front door please.", "Log my visit for today."):
        ask(http, key, vault(SECRET), question)


def test_another_namespace_learns_nothing_of_a_system_prompt_through_reuse(gateway_at):
    with gateway_at("quiet") as http:
        alone = probe(http, KEY_B)  # nobody sent the secret here
    with gateway_at("busy") as http:
        victim(http)
        after_victim = probe(http, KEY_B)
    assert after_victim == alone  # cache_n, reused_from and the header: the same as if A had never come


def test_within_a_namespace_reuse_is_shared_and_would_tell(gateway_at):
    """The probe is a real oracle: in A's own namespace the true code stands out."""
    with gateway_at("one") as http:
        victim(http)
        seen = probe(http, KEY_A)
    cells = [cache_n for cache_n, _, _ in seen]
    assert seen[GUESSES.index(SECRET)][1] == "derived" and cells[GUESSES.index(SECRET)] > cells[0]


def test_a_cache_salt_narrows_reuse_within_a_namespace(gateway_at):
    with gateway_at("salted") as http:
        for question in ("Open the front door please.", "Log my visit for today."):
            ask(http, KEY_A, vault(SECRET), question, cache_salt="alice")
        other_salt = ask(http, KEY_A, vault(SECRET), "Any mail for me?", cache_salt="bob")
        no_salt = ask(http, KEY_A, vault(SECRET), "Any parcels for me?")
        same_salt = ask(http, KEY_A, vault(SECRET), "Any news for me?", cache_salt="alice")
    assert other_salt[:2] == (0, "") and no_salt[:2] == (0, "")
    assert same_salt[1] in ("derived", "slot") and same_salt[0] > 0


def test_metrics_need_an_admin_key_when_namespaces_have_keys(gateway_at):
    with gateway_at("metrics") as http:
        assert http.get("/metrics", headers={"Authorization": f"Bearer {KEY_A}"}).status_code == 403
        assert http.get("/metrics").status_code == 401
        assert http.get("/metrics", headers={"Authorization": f"Bearer {ADMIN_KEY}"}).status_code == 200
        assert http.get("/v1/models", headers={"Authorization": f"Bearer {KEY_B}"}).status_code == 200
        assert http.get("/v1/models", headers={"Authorization": "Bearer key-of-team-b-000"}).status_code == 401
        assert http.get("/ui", headers={"Authorization": f"Bearer {KEY_A}"}).status_code == 200  # team-a's own page
        assert http.get("/ui/runtime", headers={"Authorization": f"Bearer {KEY_A}"}).text.count('id="slots"') == 0
        assert http.get("/ui", headers={"Authorization": f"Bearer {ADMIN_KEY}"}).status_code == 200


def test_with_keys_but_no_admin_key_the_inspector_stays_locked():
    keys = ApiKeys({KEY_A: Principal("team-a")})
    assert keys.inspector_key() not in (None, KEY_A) and ApiKeys().inspector_key() is None


def test_a_key_file_maps_keys_to_namespaces(tmp_path):
    path = tmp_path / "keys"
    path.write_text(f"# who is who\nteam-a {KEY_A}\n\nadmin {ADMIN_KEY}\n")
    path.chmod(0o600)
    keys = ApiKeys.of("another-admin-key-04", path)
    assert read_keys(path) == {KEY_A: Principal("team-a"), ADMIN_KEY: Principal(admin=True)}
    assert keys.principal(f"Bearer {KEY_A}".encode()) == Principal("team-a") and keys.tenants
    assert keys.principal(b"Bearer another-admin-key-04").admin and keys.principal(b"Bearer nope") is None
    assert Principal("team-a").scope() != Principal("team-b").scope() != Principal().scope() == ""
    for bad in (f"Team-A {KEY_A}", "team-a short", f"team-a {KEY_A}\nteam-b {KEY_A}", f"team-a {KEY_A} extra",
                f"../x {KEY_A}", "", "\xff".encode("latin-1")):
        path.write_bytes(bad if isinstance(bad, bytes) else bad.encode())
        with pytest.raises(ConfigError):
            read_keys(path)
    with pytest.raises(ConfigError):
        read_keys(tmp_path / "missing")


def test_a_slot_continues_only_the_cells_its_own_scope_left():
    from skillgraft.gateway.pool import ServerPool
    from skillgraft.server.slot_states import SlotStates

    class Slots(SlotStates):
        def __init__(self):
            self._slot_contexts = {}

    slots = Slots()
    slots.claim(0, "a")
    slots.note_held(0, [1, 2, 3, 4])
    slots.claim(0, "a")
    assert slots.held_tokens(0) == [1, 2, 3, 4]
    slots.claim(1, "b")
    slots.note_held(1, [1, 2, 3, 9])
    pool = ServerPool.__new__(ServerPool)
    pool.engines = [slots]
    assert pool._held_for(0, 0, [1, 2, 3, 4, 5], "a") == 4 and pool._held_for(0, 0, [1, 2, 3, 4, 5], "b") == 0
    assert pool._held_for(0, 1, [1, 2, 3, 4, 5], "b") == 3
    slots.claim(0, "b")  # another scope's request takes the slot: what it holds is unknown, evaluated afresh
    assert slots.held_tokens(0) is None and slots.held_scope(0) == "b"
