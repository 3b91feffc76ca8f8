"""The gateway-wide bound on derived states on the real path: a gateway over a real llama-server
(SmolLM2), the base and three namespaces sharing one ``--derived-mib`` budget; one team's flood
of new agent prompts evicts only its own states, the others keep theirs (the fakes' test of the
same rule: tests/unit/test_derived_budget.py)."""

from __future__ import annotations

import pytest

from tests.required import need
from tests.unit.test_derived_budget import FLOODER, KEYS, QUESTIONS, TEAMS, ADMIN_KEY, gateway_sizes
from tests.unit.test_reuse_scopes import RULES

pytestmark = [pytest.mark.server, pytest.mark.model]


def ask(http, model: str, key: str, system: str, question: str) -> None:
    body = {"model": model, "max_tokens": 2, "temperature": 0, "skillgraft": {"route": False},
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}]}
    response = http.post("/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 200, response.text


def test_one_bound_for_the_whole_gateway_on_llama_server(tmp_path, smollm2, embedder):
    need("fastapi", "skillgraft[serve]")
    from fastapi.testclient import TestClient

    from skillgraft.gateway.app import create_app
    from skillgraft.gateway.pool import ServerPool
    from skillgraft.gateway.service import Gateway
    from skillgraft.memory import SkillMemory
    from skillgraft.store.derived_budget import SharedBytes
    from tests.required import require_llama_server

    require_llama_server()
    home = tmp_path / "home"
    SkillMemory(home, engine=smollm2, embedder=embedder).close()

    def run(derived_bytes, flood: int) -> tuple[dict, object]:
        pool = ServerPool(1, 1, model="smollm2-135m")
        gateway = Gateway(home, pool, embedder=embedder, derived_bytes=derived_bytes)
        try:
            with TestClient(create_app(gateway, keys=KEYS), base_url="http://127.0.0.1") as http:
                model = http.get("/v1/models", headers={"Authorization": f"Bearer {ADMIN_KEY}"}).json()["data"][0]["id"]
                for key, team in [(ADMIN_KEY, "base"), *TEAMS.items()]:
                    for question in QUESTIONS[:2]:
                        ask(http, model, key, f"You are the {team} desk. {RULES}", question)
                for i in range(flood):  # team-a's flood of new agent prompts
                    ask(http, model, FLOODER, f"You are flood agent {i}. {RULES}", QUESTIONS[0])
                return gateway_sizes(home, gateway), gateway.memory.derived_bytes
        finally:
            gateway.close()
            pool.close()  # its llama-server, by its own PID

    one, shared = run(1 << 30, 0)
    assert sorted(one) == ["base", "team-a", "team-b", "team-c"] and isinstance(shared, SharedBytes)
    state = max(one.values())  # one agent prompt's states each
    for path in home.rglob("*.state"):
        path.unlink()
    bound = SharedBytes(int(state * 5.2), memory_bytes=int(state * 4.5))
    held, _ = run(bound, 8)
    assert sum(held.values()) <= bound  # the whole gateway, not each namespace
    assert all(held.get(team) == one[team] for team in ("base", "team-b", "team-c"))  # kept, within their share
    assert held["team-a"] >= one["team-a"]  # the flood used what the others left, no more
