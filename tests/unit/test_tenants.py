"""Namespaces (tenants): each has its own memory in the home and reads the home's store as a
read-only base; none can list, read, route to or delete another's skills, through the Python
API, the gateway (keys to namespaces), the CLI and MCP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from skillgraft.cli.main import cli
from skillgraft.deposit_policy import DepositPolicy
from skillgraft.errors import BlockNotFoundError, ConfigError, NamespaceError, SharedBaseError
from skillgraft.gateway.app import create_app
from skillgraft.gateway.keys import ApiKeys, Principal
from skillgraft.gateway.service import Gateway
from skillgraft.memory import SkillMemory
from skillgraft.memory.namespaces import better_recall, catalog_schema, namespace_backends, namespace_home
from skillgraft.core.recall import Recall
from skillgraft.testing import FakePool

from .conftest import ANSWER, GIT_MANUAL, GIT_QUERY, QUESTION, SOURDOUGH_MANUAL
from .skill_uploads import PDF, files
from .test_prefix_reuse import AGENT

BREAD_QUERY = "How long should sourdough proof in the fridge?"
KEY_A, KEY_B, DEPOSIT_KEY = "key-of-team-a-0001", "key-of-team-b-0002", "the-deposit-key-0003"
KEYS = ApiKeys({KEY_A: Principal("team-a"), KEY_B: Principal("team-b")})


@pytest.fixture
def opened(tmp_path, fake_engine, fake_embedder):
    """``open(namespace)``: a memory of the home ``tmp_path/home``, closed after the test."""
    made = []

    def open_(namespace=None) -> SkillMemory:
        memory = SkillMemory(tmp_path / "home", engine=fake_engine, embedder=fake_embedder, namespace=namespace)
        made.append(memory)
        return memory

    yield open_
    for memory in made:
        memory.close()


@pytest.fixture
def tenants(opened):
    """The base holds the git manual and a verified answer; team-a its bread manual; team-b nothing."""
    base = opened()
    base.add_manual("git-squash", GIT_MANUAL, examples=["how do I squash my last commits?"])
    base.add_solution(QUESTION, ANSWER, verifier="exact", expected=ANSWER)
    a = opened("team-a")
    a.add_manual("sourdough", SOURDOUGH_MANUAL, examples=["how do I bake sourdough bread?", BREAD_QUERY])
    return base, a, opened("team-b")


def names(memory) -> set[str]:
    return {block.name for block in memory.blocks.list()}


def test_a_namespace_sees_its_own_and_the_base_and_nobody_sees_it(tenants):
    base, a, b = tenants
    shared = names(base)
    assert "sourdough" not in shared and names(a) == shared | {"sourdough"} and names(b) == shared
    with pytest.raises(BlockNotFoundError):
        b.blocks.get("sourdough")
    with pytest.raises(BlockNotFoundError):
        base.blocks.get("sourdough")
    assert a.blocks.get("sourdough").name == "sourdough" and b.blocks.get("git-squash").name == "git-squash"


def test_routing_and_exact_answers_cross_into_the_base_but_never_into_another_namespace(tenants):
    base, a, b = tenants
    assert (a.recall(BREAD_QUERY).decision, a.recall(BREAD_QUERY).block.name) == ("graft", "sourdough")
    for memory in (base, b):
        recall = memory.recall(BREAD_QUERY)
        assert recall.block is None or recall.block.name != "sourdough"
        assert "sourdough" not in {memory.blocks.store_of(memory.blocks.get(block_id)).home.name for block_id, _ in recall.candidates}
    for memory in (a, b):
        assert memory.recall(QUESTION).decision == "exact"
        graft = memory.generate(GIT_QUERY, max_tokens=8)
        assert (graft.decision, graft.block_id) == ("graft", base.blocks.get("git-squash").id)  # the base's state, restored


def test_the_base_is_read_only_to_a_namespace(tenants):
    base, a, _ = tenants
    with pytest.raises(SharedBaseError) as refused:
        a.blocks.delete("git-squash")
    assert (refused.value.ref, refused.value.namespace) == ("git-squash", "team-a")
    assert "git-squash" in names(base)
    a.add_manual("git-squash", GIT_MANUAL + " Mine.", examples=["how do I squash my last commits?"])
    assert a.blocks.store_of(a.blocks.get("git-squash")) is a.store  # its own block of that name comes first
    assert a.blocks.delete("git-squash").name == "git-squash" and "git-squash" in names(base) | names(a)


def test_a_namespaces_corrections_are_its_own_and_never_point_into_the_base(tenants):
    base, a, b = tenants
    with pytest.raises(SharedBaseError):
        a.feedback("knead the dough please", "git-squash")
    assert a.feedback("knead the dough please", "sourdough").kind == "feedback"
    assert [row["block_id"] for row in a.store.corrections()] == [a.blocks.get("sourdough").id]
    assert base.store.corrections() == [] == b.store.corrections()


def test_deleting_a_namespaces_skill_deletes_its_states_and_nothing_of_the_base(tenants, tmp_path):
    base, a, _ = tenants
    block = a.blocks.get("sourdough")
    payload = a.store.blocks_dir / f"{block.sha256}.kv"
    for query in (BREAD_QUERY, "how do I bake sourdough bread?"):  # an agent's prompt, twice behind the skill
        answered = a.generate(query, system=AGENT, max_tokens=4)
        assert answered.block_id == block.id
    a.states.flush()
    assert payload.is_file() and list((a.store.home / "derived").rglob("*.state"))
    kept = [key for key, _, _ in a.states.cache.store.entries()]
    assert kept  # the answer left a derived state behind the block
    a.blocks.delete("sourdough")
    assert not payload.exists() and "sourdough" not in names(a)
    assert not set(kept) & {key for key, _, _ in a.states.cache.store.entries()}
    assert not list((a.store.home / "derived").rglob("*.state"))
    assert names(base) == {"git-squash", *[b.name for b in base.blocks.list("solution")]}


def test_deleting_a_base_skill_deletes_the_states_namespaces_kept_behind_it(tenants):
    base, a, _ = tenants
    block = base.blocks.get("git-squash")
    for query in (GIT_QUERY, "how do I squash my last commits?"):  # an agent's prompt, twice behind the base's skill
        answered = a.generate(query, system=AGENT, max_tokens=4)
        assert answered.block_id == block.id
    a.states.flush()
    behind = [key for key, _, _ in a.states.cache.store.entries()]
    assert behind and list((a.store.home / "derived").rglob("*.state"))
    base.blocks.delete("git-squash")
    assert not list((a.store.home / "derived").rglob("*.state"))  # nothing of it left in the namespace
    assert not set(behind) & {key for key, _, _ in a.states.cache.store.entries()}


@pytest.mark.parametrize("name", ["..", ".", "../x", "a/b", "a\\b", "Team", "x" * 65, "", "-a", "a\x00", " a", "é"])
def test_a_name_that_is_no_namespace_is_refused_and_creates_nothing(opened, tmp_path, name):
    with pytest.raises(NamespaceError) as refused:
        opened(name)
    assert refused.value.namespace == name
    assert not (tmp_path / "home").exists() and sorted(tmp_path.iterdir()) == []


def test_a_namespace_lies_in_its_home(tmp_path):
    assert namespace_home(tmp_path, "team-a") == tmp_path / "namespaces" / "team-a"
    assert namespace_home(tmp_path, None) == namespace_home(tmp_path, "default") == tmp_path
    assert namespace_backends("team-a", None, "s3://bucket/skills/") == (None, "s3://bucket/skills/namespaces/team-a")
    assert namespace_backends("default", "postgresql://db/x", "s3://b/p") == ("postgresql://db/x", "s3://b/p")
    assert catalog_schema("team-a") != catalog_schema("team-b") and len(catalog_schema("x" * 64)) <= 63
    with pytest.raises(ConfigError, match="one catalog object"):
        namespace_backends("team-a", object(), None)


def test_the_better_decision_wins_own_first_on_a_tie():
    own, base = Recall("graft", None, 0.6, 0.5, "own"), Recall("graft", None, 0.7, 0.5, "base")
    assert better_recall(own, base) is base and better_recall(base, own) is base
    assert better_recall(Recall("abstain", None, 0.9, 0.95, "o"), own) is own
    assert better_recall(Recall("exact", None, 1.0, 1.0, "o"), Recall("exact", None, 1.0, 1.0, "b")).reason == "o"


# -- the gateway: a key's namespace selects its memory -----------------------------------------


@pytest.fixture
def http(tenants, fake_engine, fake_embedder, tmp_path):
    base, _, _ = tenants
    gateway = Gateway(base.store.home, FakePool(fake_engine), embedder=fake_embedder)
    app = create_app(gateway, keys=KEYS, deposits=DepositPolicy(True, DEPOSIT_KEY, 1000.0))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        yield client
    gateway.close()


def call(http, method: str, path: str, key: str, **body):
    return http.request(method, path, headers={"Authorization": f"Bearer {key}"}, **body)


def listed(http, key: str) -> set[str]:
    response = call(http, "GET", "/v1/skillgraft/skills", key)
    assert response.status_code == 200, response.text
    return {skill["name"] for skill in response.json()["data"]}


def chat(http, key: str, query: str) -> dict:
    body = {"model": "fake-chatml", "max_tokens": 4, "messages": [{"role": "user", "content": query}]}
    response = call(http, "POST", "/v1/chat/completions", key, json=body)
    assert response.status_code == 200, response.text
    return response.json()["skillgraft"]


def test_through_the_gateway_each_key_has_its_namespaces_memory(http, tenants):
    base, a, _ = tenants
    assert "sourdough" in listed(http, KEY_A) and "sourdough" not in listed(http, KEY_B)
    assert "git-squash" in listed(http, KEY_A) & listed(http, KEY_B)
    assert chat(http, KEY_A, BREAD_QUERY)["block_name"] == "sourdough"
    assert chat(http, KEY_B, BREAD_QUERY)["block_name"] != "sourdough"
    assert chat(http, KEY_B, GIT_QUERY)["block_id"] == base.blocks.get("git-squash").id
    assert call(http, "GET", "/v1/skillgraft/skills/sourdough", KEY_A).status_code == 200
    assert call(http, "GET", "/v1/skillgraft/skills/sourdough", KEY_B).status_code == 404
    recall = call(http, "POST", "/v1/skillgraft/skills/recall", KEY_B, json={"query": BREAD_QUERY}).json()
    assert (recall.get("skill") or {}).get("name") != "sourdough"
    assert call(http, "DELETE", "/v1/skillgraft/skills/sourdough", KEY_B).status_code == 404
    refused = call(http, "DELETE", "/v1/skillgraft/skills/git-squash", KEY_A)
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "read_only_base")
    assert call(http, "DELETE", "/v1/skillgraft/skills/sourdough", KEY_A).status_code == 200
    assert "sourdough" not in names(a) and "git-squash" in names(base)


def test_a_namespaces_deposits_are_its_own_and_the_deposit_key_publishes_to_the_base(http, tenants):
    base, _, _ = tenants
    manual = {"kind": "manual", "name": "kettle", "text": "Skill manual: descale the kettle with citric acid.",
              "examples": ["how do I descale a kettle?"]}
    assert call(http, "POST", "/v1/skillgraft/skills", KEY_B, json=manual).status_code == 201
    assert "kettle" in listed(http, KEY_B) and "kettle" not in listed(http, KEY_A) and "kettle" not in names(base)
    published = {**manual, "name": "kettle-base", "text": manual["text"] + " Rinse twice."}
    assert call(http, "POST", "/v1/skillgraft/skills", DEPOSIT_KEY, json=published).status_code == 201
    assert "kettle-base" in listed(http, KEY_A) & listed(http, KEY_B)
    assert call(http, "POST", "/v1/skillgraft/skills", "not-a-key-of-anyone", json=manual).status_code == 401


def test_the_skills_api_lists_gets_and_deletes_within_the_namespace(http):
    created = call(http, "POST", "/v1/skills", KEY_A, files=[("files[]", (p, d)) for p, d in files(PDF)])
    assert created.status_code == 200, created.text
    sid = created.json()["id"]
    ids = lambda key: {skill["id"] for skill in call(http, "GET", "/v1/skills", key).json()["data"]}  # noqa: E731
    assert sid in ids(KEY_A) and sid not in ids(KEY_B)
    for method in ("GET", "DELETE"):
        assert call(http, method, f"/v1/skills/{sid}", KEY_B).status_code == 404
    assert call(http, "DELETE", f"/v1/skills/{sid}", KEY_A).status_code == 200
    assert sid not in ids(KEY_A)


# -- the CLI and MCP ------------------------------------------------------------------------------


def test_the_cli_namespace_option(runner, tenants):
    base, _, _ = tenants
    home = str(base.store.home)
    for where in (["--home", home, "--namespace", "team-a", "list", "--json"],
                  ["--home", home, "list", "--namespace", "team-a", "--json"]):
        result = runner.invoke(cli, where)
        assert result.exit_code == 0, result.output
        assert "sourdough" in {row["name"] for row in json.loads(result.output)["rows"]}
    team_b = runner.invoke(cli, ["--home", home, "--namespace", "team-b", "list", "--json"])
    assert "sourdough" not in team_b.output and "git-squash" in team_b.output
    shown = runner.invoke(cli, ["--home", home, "--namespace", "team-b", "show", "git-squash", "--json"])
    assert shown.exit_code == 0 and json.loads(shown.output)["routing_keys"], shown.output  # read from the base
    refused = runner.invoke(cli, ["--home", home, "--namespace", "team-a", "rm", "git-squash"])
    assert refused.exit_code == 1 and "shared base" in refused.output
    hostile = runner.invoke(cli, ["--home", home, "--namespace", "../../etc", "list"])
    assert hostile.exit_code == 1 and "not a namespace name" in hostile.output
    assert not (Path(home).parent.parent / "etc").exists()


def test_mcp_serves_the_namespace_it_is_given(monkeypatch, tenants, fake_engine, fake_embedder):
    from skillgraft.mcp import server

    base, _, _ = tenants
    seen = {}

    def build(memory, deposits, *, log_level):
        seen["names"] = names(memory)

        class Quiet:
            def run(self, transport):
                pass

        return Quiet()

    monkeypatch.setattr(server, "build_server", build)
    monkeypatch.setattr(server.SkillMemory, "open", classmethod(
        lambda cls, home, **options: cls(home, **{**options, "engine": fake_engine, "embedder": fake_embedder})))
    server.run_stdio(base.store.home, namespace="team-a")
    assert "sourdough" in seen["names"]
    server.run_stdio(base.store.home, namespace="team-b")
    assert "sourdough" not in seen["names"] and "git-squash" in seen["names"]


# -- deleting a namespace --------------------------------------------------------------------


def test_deleting_a_namespace_deletes_its_store_and_states_only(tenants, opened, tmp_path, runner):
    base, a, b = tenants
    home = tmp_path / "home"
    from .skill_folders import git_skill

    assert a.generate(BREAD_QUERY, max_tokens=2).decision == "graft"
    a.skills.import_folders([git_skill(tmp_path / "skills")])
    assert a.skills.warm(["git-squash"]).warmed  # a KV state of its own skill, kept
    a.close()
    own = namespace_home(home, "team-a")
    assert list((own / "blocks").glob("*.kv"))
    held = [p for p in own.rglob("*") if p.is_file()]
    assert any("derived" in p.parts for p in held)  # its KV states lie in its own folder
    size = sum(p.stat().st_size for p in held)
    b.add_manual("kettle", "Skill manual: descaling a kettle. Boil water with citric acid, rinse twice.")
    for bad, code in (("default", 1), ("team-c", 1), ("../home", 1)):
        refused = runner.invoke(cli, ["--home", str(home), "namespaces", "delete", bad])
        assert refused.exit_code == code, refused.output
    listed = runner.invoke(cli, ["--home", str(home), "namespaces", "list", "--json"])
    assert json.loads(listed.stdout) == {"namespaces": ["team-a", "team-b"]}
    deleted = runner.invoke(cli, ["--home", str(home), "namespaces", "delete", "team-a", "--json"])
    assert deleted.exit_code == 0, deleted.output
    report = json.loads(deleted.stdout)
    assert report["files"] == len(held) and report["bytes"] == size
    assert not own.exists()
    assert names(opened("team-a")) == names(base)  # opened again: an empty namespace over the base
    assert "kettle" in names(b) and {"git-squash"} <= names(base)


def test_a_namespace_whose_blocks_are_shared_is_deleted_with_its_objects_only(tmp_path, fake_engine, fake_embedder,
                                                                              monkeypatch):
    """Blocks in object storage (``file://``): the base's check counts no namespace's object as a
    stray; deleting team-a deletes every object under its prefix and its folder, not team-ab's
    objects (a name it begins) nor the base's."""
    from skillgraft.errors import NamespaceNotFoundError
    from skillgraft.store import block_objects
    from skillgraft.memory.namespaces import delete_namespace, namespaces

    home, bucket = tmp_path / "home", tmp_path / "bucket"
    url = f"file://{bucket}"

    def open_(namespace=None) -> SkillMemory:
        return SkillMemory(home, engine=fake_engine, embedder=fake_embedder, blocks=url, namespace=namespace)

    with open_() as base:
        base.add_manual("git-squash", GIT_MANUAL, examples=["how do I squash my last commits?"])
    for namespace in ("team-a", "team-ab"):
        with open_(namespace) as memory:
            memory.add_manual("sourdough", SOURDOUGH_MANUAL, examples=[BREAD_QUERY])
    held = sorted(p.relative_to(bucket).as_posix() for p in bucket.rglob("*.kv"))
    assert len(held) == 3 and len([p for p in held if p.startswith("namespaces/team-a/")]) == 1
    monkeypatch.setattr(block_objects, "UNCLAIMED_GRACE_S", 0.0)  # every object old enough to be a stray
    with open_() as base:
        assert base.blocks.check(repair=True)["ok"]
    assert sorted(p.relative_to(bucket).as_posix() for p in bucket.rglob("*.kv")) == held
    with pytest.raises(NamespaceNotFoundError) as unknown:
        delete_namespace(home, "team-c", blocks=url)
    assert unknown.value.namespace == "team-c"
    removed = delete_namespace(home, "team-a", blocks=url)
    assert (removed.objects, removed.schema) == (1, None) and removed.object_bytes > 0 and removed.files > 0
    assert sorted(p.relative_to(bucket).as_posix() for p in bucket.rglob("*.kv")) \
        == [p for p in held if not p.startswith("namespaces/team-a/")]
    assert namespaces(home) == ["team-ab"] and not namespace_home(home, "team-a").exists()
    assert not (bucket / "namespaces" / "team-a").exists()  # no empty folder left on the mount
    with open_("team-ab") as team_ab, open_() as base:
        assert names(team_ab) == {"sourdough", "git-squash"} and names(base) == {"git-squash"}
        assert base.blocks.check()["ok"] and team_ab.blocks.check()["ok"]


def test_the_namespace_registry_lists_names_only():
    """Rows of the base's ``namespaces`` table are input: a row that is no name is never listed,
    and a published state's namespace is checked before it names a schema."""
    from skillgraft.store.namespace_registry import register, registered, unregister
    from skillgraft.store.shared_derived import drop_published
    from skillgraft.testing import MemoryBlocks, MemoryCatalog

    catalog = MemoryCatalog()
    register(catalog, "team-b")
    register(catalog, "team-a")
    register(catalog, "team-a")  # once
    with catalog.write() as conn:
        conn.executemany("INSERT INTO namespaces (name, created_at) VALUES (?, 'x')",
                         [["../etc"], ["Team"], ["default"], ['x"; DROP SCHEMA public; --']])
    assert registered(catalog) == ["team-a", "team-b"]
    unregister(catalog, "team-b")
    assert registered(catalog) == ["team-a"]
    with pytest.raises(NamespaceError):
        register(catalog, "../etc")
    with pytest.raises(NamespaceError):
        drop_published(catalog, MemoryBlocks(), "blk_x", namespace='x"; DROP TABLE blocks; --')


def test_a_principals_namespace_is_checked_once_when_made_and_its_scope_is_the_namespaces():
    from skillgraft.memory.namespaces import namespace_scope

    with pytest.raises(NamespaceError):
        Principal("../team-a")
    assert Principal().scope() == "" and Principal("team-a").scope() == namespace_scope("team-a")
    assert Principal("team-a").scope("salt") == namespace_scope("team-a", "salt") != Principal("team-b").scope("salt")
    assert Principal("team-a") == Principal("team-a")  # the checked name is no field: principals compare as before
