"""Hostile review of learning from verified answers: worked examples placed beside a skill never
cost the skill its place, and a verified question is no evidence once its solution is gone."""

from __future__ import annotations

from skillgraft import AnswerOptions
from skillgraft.core.placement import EXAMPLES_HEADING
from skillgraft.memory import SkillMemory
from skillgraft.routing.experience import EXPERIENCE
from skillgraft.testing import FakeEmbedder, FakeEngine

OPTIONS = AnswerOptions(max_tokens=512)
APP = "You are a helpful assistant."
SQUASH = "Squash commits: git rebase -i HEAD~3, mark commits as squash, then save."
LEARNED = "combine my three newest commits on the feature branch"
NEAR = "combine my two newest commits on the release branch"


def open_memory(home, n_ctx: int = 4096) -> SkillMemory:
    memory = SkillMemory(home, engine=FakeEngine(n_ctx=n_ctx), embedder=FakeEmbedder())
    memory.add_manual("git-squash", SQUASH, examples=["squash my last commits with git"], capture=False)
    return memory


def test_examples_too_long_for_the_window_are_left_out_not_the_skill(tmp_path):
    with open_memory(tmp_path) as memory:
        # a verified answer as long as a solution block may be: it fits the window on its own
        answer = "git rebase -i HEAD~3 " + "x" * (memory.engine.n_ctx - 600)
        memory.learn(LEARNED, answer, skills=["git-squash"], verifier="exact", expected=answer)
        chat = [("system", APP), ("user", NEAR)]
        plan = memory.plan(chat)
        assert plan.recall.decision == "graft" and plan.recall.examples
        prompt = memory.pipeline().prompt(plan, OPTIONS)
        text = memory.engine.detokenize(list(prompt.tokens))
        assert prompt.grafted, prompt.reason  # the skill stays; the example that does not fit goes
        assert SQUASH in text and EXAMPLES_HEADING not in text
        assert memory.answer(chat, OPTIONS).note.decision == "graft"


def test_a_pruned_or_removed_solution_leaves_no_experience_behind(tmp_path):
    with open_memory(tmp_path) as memory:
        skill = memory.blocks.get("git-squash")
        plain = memory.recall(NEAR, log=False).score
        answer = "git rebase -i HEAD~3"
        solution = memory.learn(LEARNED, answer, skills=[skill], verifier="exact", expected=answer)
        memory.store.set_block_expiry(solution, "2001-01-01T00:00:00+00:00")  # expired: pruned below
        assert [r.block_id for r in memory.expiry.prune()] == [solution.id]
        assert not [k for k in memory.store.routing_keys() if k["kind"] == EXPERIENCE]
        assert memory.recall(NEAR, log=False).score == plain  # no evidence left for the skill

        other = memory.learn(NEAR, answer, skills=[skill], verifier="exact", expected=answer)
        memory.store.remove(other.id)  # any removal path (a bundle's undo, upkeep) forgets it too
        assert not [k for k in memory.store.routing_keys() if k["kind"] == EXPERIENCE]


# -- the gateway's routers: every route keeps to its key's namespace --------------------------------

from fastapi.testclient import TestClient  # noqa: E402

from skillgraft.deposit_policy import DepositPolicy  # noqa: E402
from skillgraft.gateway.app import create_app  # noqa: E402
from skillgraft.gateway.keys import ApiKeys, Principal  # noqa: E402
from skillgraft.gateway.service import Gateway  # noqa: E402
from skillgraft.testing import FakePool  # noqa: E402

from .skill_uploads import PDF, files  # noqa: E402

KEY_A, KEY_B = "key-of-team-a-0001", "key-of-team-b-0002"
KEYS = ApiKeys({KEY_A: Principal("team-a"), KEY_B: Principal("team-b")})


def _call(http, method: str, path: str, key: str, **body):
    return http.request(method, path, headers={"Authorization": f"Bearer {key}"}, **body)


def test_no_route_reads_or_writes_another_namespaces_skills_warms_or_corrections(tmp_path):
    with SkillMemory(tmp_path / "home", engine=FakeEngine(), embedder=FakeEmbedder()) as base:
        base.add_manual("git-squash", SQUASH, examples=["squash my last commits with git"], capture=False)
    gateway = Gateway(tmp_path / "home", FakePool(FakeEngine()), embedder=FakeEmbedder())
    app = create_app(gateway, keys=KEYS, deposits=DepositPolicy(True, "the-deposit-key-0003", 1000.0))
    try:
        with TestClient(app, base_url="http://127.0.0.1") as http:
            created = _call(http, "POST", "/v1/skills", KEY_A, files=[("files[]", (p, d)) for p, d in files(PDF)])
            assert created.status_code == 200, created.text
            sid, name = created.json()["id"], created.json()["name"]
            fixed = _call(http, "POST", "/v1/skillgraft/skills/feedback", KEY_A,
                          json={"query": "merge two pdf files", "expected": None})
            assert fixed.status_code == 200, fixed.text
            correction = fixed.json()["correction_id"]
            assert correction is not None
            started = _call(http, "POST", "/v1/skillgraft/warms", KEY_A, json={"skills": [name]})
            assert started.status_code == 202, started.text
            warm = started.json()["id"]

            for method, path in [("GET", f"/v1/skills/{sid}"), ("GET", f"/v1/skills/{sid}/content"),
                                 ("GET", f"/v1/skills/{sid}/versions"), ("GET", f"/v1/skills/{sid}/versions/1"),
                                 ("GET", f"/v1/skills/{sid}/versions/1/content"), ("DELETE", f"/v1/skills/{sid}"),
                                 ("DELETE", f"/v1/skills/{sid}/versions/1"), ("GET", f"/v1/skillgraft/skills/{name}"),
                                 ("GET", f"/v1/skillgraft/skills/{name}/capture"),
                                 ("DELETE", f"/v1/skillgraft/skills/{name}"),
                                 ("GET", f"/v1/skillgraft/warms/{warm}"), ("DELETE", f"/v1/skillgraft/warms/{warm}")]:
                refused = _call(http, method, path, KEY_B)
                assert refused.status_code == 404, (method, path, refused.text)
                assert set(refused.json()["error"]) == {"message", "type", "param", "code"}
            assert _call(http, "POST", f"/v1/skills/{sid}", KEY_B, json={"default_version": 1}).status_code == 404
            assert _call(http, "POST", "/v1/skillgraft/warms", KEY_B, json={"skills": [name]}).status_code == 404
            assert _call(http, "GET", "/v1/skillgraft/warms", KEY_B).json()["data"] == []
            assert _call(http, "GET", "/v1/skills", KEY_B).json()["data"] == []
            assert _call(http, "GET", "/v1/skillgraft/skills/feedback", KEY_B).json()["data"] == []
            gone = _call(http, "DELETE", f"/v1/skillgraft/skills/feedback/{correction}", KEY_B)
            assert gone.status_code in (400, 404) and "no routing correction" in gone.json()["error"]["message"]
            assert name not in {s["name"] for s in _call(http, "GET", "/v1/skillgraft/skills", KEY_B).json()["data"]}
            # team A's things are all still there
            assert _call(http, "GET", f"/v1/skills/{sid}", KEY_A).status_code == 200
            assert _call(http, "GET", f"/v1/skillgraft/warms/{warm}", KEY_A).status_code == 200
            assert len(_call(http, "GET", "/v1/skillgraft/skills/feedback", KEY_A).json()["data"]) == 1
    finally:
        gateway.close()


def test_a_bad_chat_from_a_namespace_key_is_an_openai_error(tmp_path):
    gateway = Gateway(tmp_path / "home", FakePool(FakeEngine()), embedder=FakeEmbedder())
    app = create_app(gateway, keys=KEYS)
    try:
        with TestClient(app, base_url="http://127.0.0.1") as http:
            for body, status in [({"model": "other", "messages": [{"role": "user", "content": "hi"}]}, 404),
                                 ({"model": "fake-chatml", "messages": "hi"}, 400),
                                 ({"model": "fake-chatml", "messages": [{"role": "user", "content": "hi"}],
                                   "logit_bias": {"1": 2}}, 400)]:
                response = _call(http, "POST", "/v1/chat/completions", KEY_A, json=body)
                assert response.status_code == status, response.text
                assert set(response.json()["error"]) == {"message", "type", "param", "code"}
            assert _call(http, "POST", "/v1/chat/completions", "no-such-key-00000000", json={}).status_code == 401
    finally:
        gateway.close()
